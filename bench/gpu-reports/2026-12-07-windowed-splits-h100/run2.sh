#!/usr/bin/env bash
# The next call on the same warm machine (the binaries, cubins and checkpoint from run.sh still in /tmp):
# the SmolLM2 shape's 120K sink-window read in 8 splits, the policy's (4 at that build) and one, twice over.
export DOCQA_CUBIN_DIR=/tmp/stage/cubins
for splits in 8 0 1 8 0 1; do
  DOCQA_CUDA_WINDOWED_SPLITS=$splits timeout 60 /tmp/docqa generate --device cuda --model /tmp/smollm2-135m --raw --max-tokens 1 \
    --warm-up --sink-window 8188 --prompt-file /tmp/stage/meeting.txt 2>&1 | grep "prompt tokens (0" | sed "s/^/splits=$splits /" | cut -c1-200
done
