#!/usr/bin/env bash
# The reading estimates with a key's measured pace: the Llama-3.2-1B and Llama-3.1-8B shapes, without and with --warm-up.
set -u
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/o && xz -dc .dev/s3/docqa.xz > /tmp/docqa && chmod +x /tmp/docqa
export DOCQA_CUBIN_DIR=$PWD/.dev/s3/cubins
pack() { (cd /tmp/o && tar cJf $OUT/logs.tar.xz .); }
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*)
    xz -dc .dev/s3/gpu-check.xz > /tmp/gpu-check && chmod +x /tmp/gpu-check
    GPU_CHECK=/tmp/gpu-check DOCQA=/tmp/docqa timeout 250 bash bench/gpu_record.sh /tmp/o/record docqa anchors
    echo "record done at $((SECONDS-start)) s"; pack; cp /tmp/o/record/summary.md $OUT/ 2>/dev/null
    GPU_CHECK=/tmp/gpu-check DOCQA=/tmp/docqa timeout 150 bash bench/gpu_record.sh /tmp/o/record real
    echo "real done at $((SECONDS-start)) s"; pack; cp /tmp/o/record/summary.md $OUT/ 2>/dev/null ;;
esac
timeout $((580 - (SECONDS-start))) bash bench/reading_estimates.sh /tmp/docqa /tmp/o/est llama-3.2-1b smollm2-135m; echo "1b done at $((SECONDS-start)) s"; pack
timeout $((580 - (SECONDS-start))) bash bench/reading_estimates.sh /tmp/docqa /tmp/o/est llama-3.1-8b; echo "8b done at $((SECONDS-start)) s"; pack
grep -h "reading estimated\|^==" /tmp/o/est/*.txt | cut -c1-200
