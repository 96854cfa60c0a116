# What the shell benchmarks share (sourced): seconds since a start, and whether two outputs are the same files.
since() { awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $1 }"; }  # since START (date +%s.%N)
same() {  # two zarr folders: identical files?
  cmp -s <(cd "$1" && find . -type f -exec md5sum {} + | sort) <(cd "$2" && find . -type f -exec md5sum {} + | sort)
}
