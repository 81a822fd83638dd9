/* netvol: a local folder that behaves like a network volume, for any process that loads it.

   Loaded with LD_PRELOAD, it wraps the libc calls that touch files under
   NETVOL_PREFIX ("remote" paths) and gives them what a FUSE mount over
   object storage has and a local disk hides: a round trip per open and per
   listing, a bounded bandwidth per open file, transient errors, stalled
   requests, a path that stays unreadable, and, with NETVOL_STRICT=1, only
   the writes that object storage can promise. NETVOL_TRACE receives one line
   per open, per listing and (NETVOL_TRACE_BYTES=1) per closed remote file
   that was read, so a test can count what crossed the "network".

   Everything is configured once per process from the environment (see
   README.md beside this file). Reads through memory maps are not slowed. */

#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- configuration ------------------------------------------------------ */

static struct {
    int ready;
    const char *prefix;
    size_t prefix_len;
    double open_ms, list_ms, hang_ms;
    double bytes_per_ns;       /* 0: unlimited */
    double fail, hang;         /* probabilities */
    const char *fail_match;
    const char *trace;
    int trace_bytes, strict;
    uint64_t seed;
} cfg;

static double env_number(const char *name, double fallback) {
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    double x = strtod(v, &end);
    return *end ? fallback : x;
}

static const char *env_text(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* Idempotent, so a call made before the constructor ran (another library's
   constructor opening a file) configures the process as well. */
__attribute__((constructor)) static void configure(void) {
    if (cfg.ready) return;
    cfg.prefix = env_text("NETVOL_PREFIX");
    if (!cfg.prefix) cfg.prefix = "/Volumes/";
    cfg.prefix_len = strlen(cfg.prefix);
    cfg.open_ms = env_number("NETVOL_OPEN_MS", 10);
    cfg.list_ms = env_number("NETVOL_LIST_MS", 20);
    cfg.bytes_per_ns = env_number("NETVOL_MBPS", 200) * 1e6 / 1e9;
    cfg.fail = env_number("NETVOL_FAIL_PCT", 0) / 100;
    cfg.hang = env_number("NETVOL_HANG_PCT", 0) / 100;
    cfg.hang_ms = env_number("NETVOL_HANG_MS", 30000);
    cfg.fail_match = env_text("NETVOL_FAIL_MATCH");
    cfg.trace = env_text("NETVOL_TRACE");
    cfg.trace_bytes = env_number("NETVOL_TRACE_BYTES", 0) != 0;
    cfg.strict = env_number("NETVOL_STRICT", 0) != 0;
    cfg.seed = (uint64_t)env_number("NETVOL_SEED", 1);
    __atomic_store_n(&cfg.ready, 1, __ATOMIC_RELEASE);
}

#define CONFIGURED() do { if (!__atomic_load_n(&cfg.ready, __ATOMIC_ACQUIRE)) configure(); } while (0)

/* The next definition of a wrapped call (libc's), looked up once. */
#define NEXT(name) \
    static __typeof__(name) *next_##name; \
    if (!next_##name) next_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

/* ---- time and chance ---------------------------------------------------- */

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void sleep_until(int64_t deadline) {
    struct timespec t = {deadline / 1000000000, deadline % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {}
}

static void pause_ms(double ms) {
    if (ms > 0) sleep_until(now_ns() + (int64_t)(ms * 1e6));
}

/* splitmix64 per thread, reseeded in a forked child so parent and child draw differently. */
static __thread uint64_t rng;
static __thread pid_t rng_pid;

static int chance(double p) {
    if (p <= 0) return 0;
    pid_t pid = getpid();
    if (pid != rng_pid) {
        rng_pid = pid;
        rng = cfg.seed * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)pid << 32) ^ (uint64_t)(uintptr_t)&rng;
    }
    uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53 < p;
}

/* ---- remote paths ------------------------------------------------------- */

/* Whether `path` (relative to `dirfd`) lies under the prefix; its absolute
   form, for the trace, goes to `out` (PATH_MAX bytes). */
static int remote_at(int dirfd, const char *path, char *out) {
    CONFIGURED();
    if (!path) return 0;
    if (path[0] == '/') {
        if (strncmp(path, cfg.prefix, cfg.prefix_len) != 0) return 0;
        snprintf(out, PATH_MAX, "%s", path);
        return 1;
    }
    char base[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base)) return 0;
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, base, sizeof base - 1);
        if (n < 0) return 0;
        base[n] = 0;
    }
    if (snprintf(out, PATH_MAX, "%s/%s", base, path) >= PATH_MAX) return 0;
    return strncmp(out, cfg.prefix, cfg.prefix_len) == 0;
}

/* The trace file is opened for each line, through raw system calls: a
   process that closes every descriptor (a daemon, a sandbox) cannot make a
   line land in another file, and the wrappers never see their own writes. */
static void trace(const char *what, const char *path, long long bytes) {
    if (!cfg.trace) return;
    char line[PATH_MAX + 64];
    int n = bytes < 0 ? snprintf(line, sizeof line, "%s %s\n", what, path)
                      : snprintf(line, sizeof line, "%s %s %lld\n", what, path, bytes);
    if (n <= 0 || n >= (int)sizeof line) return;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, cfg.trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    (void)!syscall(SYS_write, fd, line, (size_t)n);
    syscall(SYS_close, fd);
}

/* ---- open remote files -------------------------------------------------- */

#define MAX_FD 65536

static struct open_file {
    char *path;         /* non-NULL: a remote file is open on this descriptor */
    int writing;
    long long bytes;    /* read through this open, traced at close */
    int64_t free_at;    /* when the open's bandwidth is free again (ns) */
} files[MAX_FD];

static struct open_file *remote_fd(int fd) {
    return fd >= 0 && fd < MAX_FD && __atomic_load_n(&files[fd].path, __ATOMIC_ACQUIRE) ? &files[fd] : NULL;
}

static int fail(int err) {
    errno = err;
    return -1;
}

static int creates(int flags) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

/* One round trip to the service, and the draw of whether it fails. */
static int request_fails(const char *kind, const char *abs) {
    pause_ms(cfg.open_ms);
    trace(kind, abs, -1);
    return (cfg.fail_match && strstr(abs, cfg.fail_match)) || chance(cfg.fail);
}

static int track(int fd, int flags, const char *abs) {
    int writing = (flags & O_ACCMODE) != O_RDONLY;
    struct stat st;
    if (cfg.strict && writing && (flags & O_APPEND) && syscall(SYS_fstat, fd, &st) == 0 && st.st_size > 0) {
        syscall(SYS_close, fd);  /* an object cannot grow: what `open(p, "a")` meets on a volume */
        return fail(ESPIPE);
    }
    if (fd < MAX_FD) {
        struct open_file *f = &files[fd];
        f->writing = writing;
        f->bytes = 0;
        f->free_at = 0;
        free(__atomic_exchange_n(&f->path, strdup(abs), __ATOMIC_ACQ_REL));
    }
    return fd;
}

/* Every open funnels here. A create draws its fault before the real open,
   so a failed create leaves no object behind; any other open is made
   first, because only then is it known whether it opened a folder (a
   listing, whatever its flags) or a file. */
static int open_at(int dirfd, const char *path, int flags, mode_t mode) {
    NEXT(openat);
    char abs[PATH_MAX];
    if (!remote_at(dirfd, path, abs)) return next_openat(dirfd, path, flags, mode);
    if (creates(flags)) {
        if (request_fails("open", abs)) return fail(EIO);
        int fd = next_openat(dirfd, path, flags, mode);
        return fd < 0 ? fd : track(fd, flags, abs);
    }
    int fd = next_openat(dirfd, path, flags, mode);
    int saved = errno;
    struct stat st;
    if ((flags & O_DIRECTORY) || (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0 && S_ISDIR(st.st_mode))) {
        pause_ms(cfg.list_ms);
        trace("list", abs, -1);
        errno = saved;
        return fd;
    }
    if (request_fails("open", abs)) {
        if (fd >= 0) syscall(SYS_close, fd);
        return fail(EIO);
    }
    errno = saved;
    return fd < 0 ? fd : track(fd, flags, abs);
}

#define MODE_ARG(flags) \
    mode_t mode = 0; \
    if (creates(flags)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }

int open(const char *path, int flags, ...) { MODE_ARG(flags) return open_at(AT_FDCWD, path, flags, mode); }
int open64(const char *path, int flags, ...) { MODE_ARG(flags) return open_at(AT_FDCWD, path, flags, mode); }
int openat(int dirfd, const char *path, int flags, ...) { MODE_ARG(flags) return open_at(dirfd, path, flags, mode); }
int openat64(int dirfd, const char *path, int flags, ...) { MODE_ARG(flags) return open_at(dirfd, path, flags, mode); }
/* What fortified builds (coreutils) call for two-argument opens. */
int __open_2(const char *path, int flags) { return open_at(AT_FDCWD, path, flags, 0); }
int __open64_2(const char *path, int flags) { return open_at(AT_FDCWD, path, flags, 0); }
int __openat_2(int dirfd, const char *path, int flags) { return open_at(dirfd, path, flags, 0); }
int __openat64_2(int dirfd, const char *path, int flags) { return open_at(dirfd, path, flags, 0); }

/* opendir opens its folder inside libc, out of the wrappers' reach. */
DIR *opendir(const char *path) {
    NEXT(opendir);
    char abs[PATH_MAX];
    if (remote_at(AT_FDCWD, path, abs)) {
        pause_ms(cfg.list_ms);
        trace("list", abs, -1);
    }
    return next_opendir(path);
}

/* Forgotten before the number can be handed out again. */
static void forget(int fd) {
    struct open_file *f = remote_fd(fd);
    if (!f) return;
    char *path = __atomic_exchange_n(&f->path, NULL, __ATOMIC_ACQ_REL);
    long long bytes = __atomic_load_n(&f->bytes, __ATOMIC_RELAXED);
    if (path && cfg.trace_bytes && bytes > 0) trace("read", path, bytes);
    free(path);
}

int close(int fd) {
    NEXT(close);
    forget(fd);
    return next_close(fd);
}

/* What a process leaves open at its exit was read as well: each open is traced as its close would trace it,
   whether the process returns from main (the destructor) or ends by _exit (os._exit, a forked DataLoader
   worker), which runs no destructor. */
static void forget_all(void) {
    for (int fd = 0; fd < MAX_FD; fd++)
        if (__atomic_load_n(&files[fd].path, __ATOMIC_ACQUIRE)) forget(fd);
}

__attribute__((destructor)) static void at_exit(void) { forget_all(); }

void _exit(int status) {
    NEXT(_exit);
    forget_all();
    next__exit(status);
    __builtin_unreachable();
}

void _Exit(int status) {
    NEXT(_Exit);
    forget_all();
    next__Exit(status);
    __builtin_unreachable();
}

/* A descriptor replaced by dup2 is closed by it: a local file must not inherit its remote past. */
int dup2(int old, int new_) {
    NEXT(dup2);
    if (old != new_) forget(new_);
    return next_dup2(old, new_);
}

int dup3(int old, int new_, int flags) {
    NEXT(dup3);
    forget(new_);
    return next_dup3(old, new_, flags);
}

/* ---- reads -------------------------------------------------------------- */

/* Before a read of a remote file: maybe a stall, maybe a transient error. */
static int read_fails(struct open_file *f) {
    if (!f) return 0;
    if (chance(cfg.hang)) pause_ms(cfg.hang_ms);
    return chance(cfg.fail);
}

/* After it: `n` bytes crossed the network at the open's bandwidth, which
   reads on one descriptor share (pyarrow reads ranges of one open file from
   several threads at once). */
static void received(struct open_file *f, ssize_t n) {
    if (!f || n <= 0) return;
    __atomic_add_fetch(&f->bytes, n, __ATOMIC_RELAXED);
    if (cfg.bytes_per_ns <= 0) return;
    int64_t cost = (int64_t)(n / cfg.bytes_per_ns), now = now_ns(), done;
    int64_t free_at = __atomic_load_n(&f->free_at, __ATOMIC_RELAXED);
    do {
        done = (free_at > now ? free_at : now) + cost;
    } while (!__atomic_compare_exchange_n(&f->free_at, &free_at, done, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    sleep_until(done);
}

#define READ_BODY(fd, call) \
    struct open_file *f = remote_fd(fd); \
    if (read_fails(f)) return fail(EIO); \
    ssize_t n = call; \
    received(f, n); \
    return n;

ssize_t read(int fd, void *buf, size_t count) { NEXT(read); READ_BODY(fd, next_read(fd, buf, count)) }
ssize_t pread(int fd, void *buf, size_t count, off_t off) { NEXT(pread); READ_BODY(fd, next_pread(fd, buf, count, off)) }
ssize_t pread64(int fd, void *buf, size_t count, off64_t off) { NEXT(pread64); READ_BODY(fd, next_pread64(fd, buf, count, off)) }
ssize_t readv(int fd, const struct iovec *iov, int cnt) { NEXT(readv); READ_BODY(fd, next_readv(fd, iov, cnt)) }
ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) { NEXT(preadv); READ_BODY(fd, next_preadv(fd, iov, cnt, off)) }
ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off) { NEXT(preadv64); READ_BODY(fd, next_preadv64(fd, iov, cnt, off)) }
/* Python's os.preadv calls preadv2 wherever the C library has it. */
ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
    NEXT(preadv2);
    READ_BODY(fd, next_preadv2(fd, iov, cnt, off, flags))
}
ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
    NEXT(preadv64v2);
    READ_BODY(fd, next_preadv64v2(fd, iov, cnt, off, flags))
}
ssize_t sendfile(int out, int in, off_t *off, size_t count) { NEXT(sendfile); READ_BODY(in, next_sendfile(out, in, off, count)) }
ssize_t sendfile64(int out, int in, off64_t *off, size_t count) { NEXT(sendfile64); READ_BODY(in, next_sendfile64(out, in, off, count)) }
ssize_t copy_file_range(int in, off64_t *in_off, int out, off64_t *out_off, size_t count, unsigned int flags) {
    NEXT(copy_file_range);
    READ_BODY(in, next_copy_file_range(in, in_off, out, out_off, count, flags))
}

/* ---- writes under object-storage semantics (NETVOL_STRICT=1) ------------ */

/* A remote file open for writing, under strict semantics: written front to back only. */
static int strict_writer(int fd) {
    struct open_file *f = remote_fd(fd);
    return cfg.strict && f && f->writing;
}

static int strict_at(int dirfd, const char *path) {
    char abs[PATH_MAX];
    return cfg.strict && remote_at(dirfd, path, abs);
}

static int is_folder(int dirfd, const char *path) {
    struct stat st;
    return syscall(SYS_newfstatat, dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

int symlink(const char *target, const char *path) {
    NEXT(symlink);
    return strict_at(AT_FDCWD, path) ? fail(EPERM) : next_symlink(target, path);
}

int symlinkat(const char *target, int dirfd, const char *path) {
    NEXT(symlinkat);
    return strict_at(dirfd, path) ? fail(EPERM) : next_symlinkat(target, dirfd, path);
}

int link(const char *old, const char *new_) {
    NEXT(link);
    return strict_at(AT_FDCWD, old) || strict_at(AT_FDCWD, new_) ? fail(EPERM) : next_link(old, new_);
}

int linkat(int olddirfd, const char *old, int newdirfd, const char *new_, int flags) {
    NEXT(linkat);
    return strict_at(olddirfd, old) || strict_at(newdirfd, new_) ? fail(EPERM)
                                                                 : next_linkat(olddirfd, old, newdirfd, new_, flags);
}

/* A folder on object storage is a prefix of names: renaming it would mean
   copying every object under it, which a volume refuses. A file's rename is
   fine. Flags (no-replace, exchange) have no object-storage equivalent. */
static int rename_refused(int olddirfd, const char *old, int newdirfd, const char *new_, unsigned int flags) {
    if (!strict_at(olddirfd, old) && !strict_at(newdirfd, new_)) return 0;
    if (flags) return ENOSYS;
    if (strict_at(olddirfd, old) && is_folder(olddirfd, old)) return EXDEV;
    return 0;
}

int rename(const char *old, const char *new_) {
    NEXT(rename);
    int err = rename_refused(AT_FDCWD, old, AT_FDCWD, new_, 0);
    return err ? fail(err) : next_rename(old, new_);
}

int renameat(int olddirfd, const char *old, int newdirfd, const char *new_) {
    NEXT(renameat);
    int err = rename_refused(olddirfd, old, newdirfd, new_, 0);
    return err ? fail(err) : next_renameat(olddirfd, old, newdirfd, new_);
}

int renameat2(int olddirfd, const char *old, int newdirfd, const char *new_, unsigned int flags) {
    NEXT(renameat2);
    int err = rename_refused(olddirfd, old, newdirfd, new_, flags);
    return err ? fail(err) : next_renameat2(olddirfd, old, newdirfd, new_, flags);
}

int flock(int fd, int op) {
    NEXT(flock);
    return cfg.strict && remote_fd(fd) ? fail(ENOLCK) : next_flock(fd, op);
}

static int lock_command(int cmd) {
    return cmd == F_SETLK || cmd == F_SETLKW || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
}

int fcntl(int fd, int cmd, ...) {
    NEXT(fcntl);
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);  /* an int or a pointer: either travels in one register */
    va_end(ap);
    return cfg.strict && lock_command(cmd) && remote_fd(fd) ? fail(ENOLCK) : next_fcntl(fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
    NEXT(fcntl64);
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return cfg.strict && lock_command(cmd) && remote_fd(fd) ? fail(ENOLCK) : next_fcntl64(fd, cmd, arg);
}

/* Asking where one is (Python's buffered writer does) is not a seek. */
off_t lseek(int fd, off_t off, int whence) {
    NEXT(lseek);
    return strict_writer(fd) && !(off == 0 && whence == SEEK_CUR) ? fail(ESPIPE) : next_lseek(fd, off, whence);
}

off64_t lseek64(int fd, off64_t off, int whence) {
    NEXT(lseek64);
    return strict_writer(fd) && !(off == 0 && whence == SEEK_CUR) ? fail(ESPIPE) : next_lseek64(fd, off, whence);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off) {
    NEXT(pwrite);
    return strict_writer(fd) ? fail(ESPIPE) : next_pwrite(fd, buf, count, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t off) {
    NEXT(pwrite64);
    return strict_writer(fd) ? fail(ESPIPE) : next_pwrite64(fd, buf, count, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    NEXT(pwritev);
    return strict_writer(fd) ? fail(ESPIPE) : next_pwritev(fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
    NEXT(pwritev64);
    return strict_writer(fd) ? fail(ESPIPE) : next_pwritev64(fd, iov, cnt, off);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
    NEXT(pwritev2);
    return strict_writer(fd) && off != -1 ? fail(ESPIPE) : next_pwritev2(fd, iov, cnt, off, flags);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
    NEXT(pwritev64v2);
    return strict_writer(fd) && off != -1 ? fail(ESPIPE) : next_pwritev64v2(fd, iov, cnt, off, flags);
}

int ftruncate(int fd, off_t len) {
    NEXT(ftruncate);
    return strict_writer(fd) && len != 0 ? fail(EOPNOTSUPP) : next_ftruncate(fd, len);
}

int ftruncate64(int fd, off64_t len) {
    NEXT(ftruncate64);
    return strict_writer(fd) && len != 0 ? fail(EOPNOTSUPP) : next_ftruncate64(fd, len);
}

int truncate64(const char *path, off64_t len) {
    NEXT(truncate64);
    return len != 0 && strict_at(AT_FDCWD, path) ? fail(EOPNOTSUPP) : next_truncate64(path, len);
}

int truncate(const char *path, off_t len) {
    NEXT(truncate);
    return len != 0 && strict_at(AT_FDCWD, path) ? fail(EOPNOTSUPP) : next_truncate(path, len);
}
