#!/bin/sh
# The main job on a built-in default (make demo). Until the training runtime
# lands: every schedule compared for p = 8, m = 24 with unequal costs, and
# SVG timelines of 1f1b, zb-h1, v-half and v-min written to out/demo/.
set -eu
cd "$(dirname "$0")/.."
BIN=${PM_BIN:-build/pipemem}
OUT=${PM_DEMO_OUT:-out/demo}
COSTS=4959,5217,3519,213   # F, B, W, C in microseconds, unequal as in real models
mkdir -p "$OUT"
echo "== pipemem compare -p 8 -m 24 --costs $COSTS"
"$BIN" compare -p 8 -m 24 --costs "$COSTS"
echo
for k in 1f1b zb-h1 v-half v-min; do
    "$BIN" schedule --kind "$k" -p 8 -m 24 --costs "$COSTS" --format svg -o "$OUT/$k.svg"
done
echo "timelines: $OUT/1f1b.svg $OUT/zb-h1.svg $OUT/v-half.svg $OUT/v-min.svg"
