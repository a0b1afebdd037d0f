# lib.sh: what the benchmarks share (sourced, not run): the release build, fio and the disk it measures, the real-width
# k3-slice checkpoint, dropping the page cache, sizes.

# Install the packages, configure and build RelWithDebInfo into build dir $1 (default build).
bench_build() {
  local dir=${1:-build}
  bash deploy/install-deps.sh
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$dir" -j"$(nproc)" >/dev/null
}

bench_need_fio() { command -v fio >/dev/null || apt-get install -y -qq fio >/dev/null; }

# The disk under file $1, page cache dropped: fio O_DIRECT random 16 MiB reads at queue depth 8
# for 20 s, its JSON into $2.
bench_fio() {
  drop
  fio --name=bench --filename="$1" --readonly --direct=1 --rw=randread --bs=16M --iodepth=8 \
      --ioengine=libaio --runtime=20 --time_based --output-format=json > "$2" 2>/dev/null
}

# Write the 3-layer k3-slice (about 41 GB) with binary $1 into $2 unless it is there.
bench_slice() {
  if [ ! -f "$2/config.json" ]; then
    mkdir -p "$(dirname "$2")"
    "$1" synth --preset k3-slice --layers 3 --out "$2"
  fi
}

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
to_bytes() { numfmt --from=iec "$1"; }

# The binary and a scratch directory: $bin as given, or (when empty) the release build's
# build/moestream, built now; $out a new directory removed when the script exits.
bench_bin_out() {
  if [ -z "$bin" ]; then
    bench_build
    bin=$PWD/build/moestream
  fi
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
}
