"""Pure planning: shares of a listing over ranks and workers, row ranges, runs of rows, and resumes."""
