# Where a step on real JPEGs loses to synthetic data: `--profile 5` of ResNet-50 training at batch
# 256 (bf16, channels-last) on synthetic data, on a JPEG folder with the hardware decoders and with
# nvjpeg on the SMs, each a fresh process, printing each run's line and its step split
# (docs/profile.md). NVIMGCODEC_SITE: where nvImageCodec's wheels were installed.
#   FOLDER=/tmp/img bash benchmarks/where_decoding_goes.sh
set -u
common="--model resnet50 --batch 256 --precision bf16 --channels-last --steps 60 --warmup 15 --profile 5 --db ${DB:-/tmp/where.db}"
folder="--data folder:$FOLDER --workers ${WORKERS:-16}"
run() {  # label, extra PYTHONPATH, args
  echo "== $1"
  PYTHONPATH="$PYTHONPATH${2:+:$2}" python3 -m dlbench run train $common $3 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|nvJPEG2000"
}
run synthetic "" ""
run "folder, hardware decoders" "$NVIMGCODEC_SITE" "$folder --decode hardware"
run "folder, nvjpeg on the SMs" "" "$folder --decode gpu"
PYTHONPATH="$PYTHONPATH:$NVIMGCODEC_SITE" python3 -m dlbench doctor --db ${DB:-/tmp/where.db} 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|nvJPEG2000"
