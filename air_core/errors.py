"""The errors the library raises: each says what was wrong and how to fix it."""


class AirError(Exception):
    """Base class of every error raised by air_core and its front doors."""


class VolumePathError(AirError, ValueError):
    """A path that is not a usable Unity Catalog volume path."""


class EmptyVolumeError(AirError, ValueError):
    """A listing that matched no file."""


class ManifestMismatchError(AirError, RuntimeError):
    """Two processes planned from different listings of the same folder."""


class AuthError(AirError, PermissionError):
    """The Files API refused this process's credentials, or they are missing."""


class FetchError(AirError, OSError):
    """A file could not be copied from the volume into the cache."""


class StateError(AirError, ValueError):
    """A saved iteration state that does not fit this stream."""


class OptionError(AirError, ValueError):
    """An option with an unknown name or a value out of range."""


class ParquetError(AirError, ValueError):
    """A file that is not readable Parquet, or Parquet files that do not share one schema."""


class TableError(AirError, ValueError):
    """A table that cannot be exported: not a Delta table, a version it does not have, or unreadable data."""


class RecordError(AirError, ValueError):
    """A record of a line file (JSON Lines, CSV, text) that does not parse, or does not fit the features."""


class MediaError(RecordError):
    """A record that names a medium that cannot be read: missing from the volume, a folder, unreadable, or one
    that does not decode as its kind. The message names the records file, the record's line (or row) and the
    medium's path."""
