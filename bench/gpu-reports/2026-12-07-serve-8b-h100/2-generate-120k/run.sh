#!/usr/bin/env bash
# A 120K-token prompt at the Llama-3.1-8B shape asked twice (the second from the prefix cache), 16 tokens each:
# decode at 120K of context with cuBLASLt and with plain cuBLAS.
set -u
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/o && xz -dc .dev/s3/docqa.xz > /tmp/docqa && chmod +x /tmp/docqa
export DOCQA_CUBIN_DIR=$PWD/.dev/s3/cubins
pack() { (cd /tmp/o && tar cJf $OUT/logs.tar.xz .); }
/tmp/docqa models synth --shape llama-3.1-8b --seed 1 --out /tmp/m8b > /dev/null; echo "synth at $((SECONDS-start)) s"
python3 -c "import random,string; random.seed(120); print(''.join(random.choices(string.ascii_lowercase + ' ', k=119999)), end='')" > /tmp/p120k.txt
for lt in 1 0; do
  DOCQA_CUDA_LT_GEMM=$lt RUST_LOG=docqa_engine::serving=debug timeout 200 /tmp/docqa generate --device cuda --raw --model /tmp/m8b \
    --adapter none --max-tokens 16 --repeat 2 --prompt-file /tmp/p120k.txt > /tmp/o/gen-lt$lt.out 2> /tmp/o/gen-lt$lt.txt
  echo "lt=$lt exit $? at $((SECONDS-start)) s"; pack
  grep -h "prompt tokens" /tmp/o/gen-lt$lt.txt | cut -c1-220
  sed 's/\x1b\[[0-9;]*m//g' /tmp/o/gen-lt$lt.txt | grep "tokens=1 " | awk '{for(i=1;i<=NF;i++){if($i~/^forward_us=/){split($i,a,"=");f=a[2]} if($i~/^picks_us=/){split($i,b,"=");p=b[2]}} printf "%d+%d ", f, p} END {print ""}'
  grep -i "warn\|graph" /tmp/o/gen-lt$lt.txt | head -5
done
