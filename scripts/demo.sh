#!/bin/sh
# The main job on a built-in default (make demo):
#   1. a SentencePiece tokenizer is trained on the fortunes corpus, which
#      becomes token files (subword ids, and bytes for acts 3 and 5);
#   2. a small GPT trains for about a minute and a half on 4 device threads
#      under --schedule auto with half of 1F1B's activation memory; its
#      measured peak is printed beside 1F1B's (measured in the same run), then
#      text sampled from it, the measured timeline as SVG and a Chrome trace;
#   3. a model whose state does not fit one device's budget (--device-mem)
#      is refused on one device and trains on four, each holding only its
#      stages (the plan printed, then the process's measured peak);
#   4. every main schedule trains a few steps of the same model, and a table
#      puts each one's measured step time, bubble and peak activation memory
#      beside the simulator's prediction;
#   5. the schedule engine compares every schedule for p = 8, m = 24 with
#      unequal costs and draws four of them;
#   6. model selection: 2 learning rates x 2 depths trained at once on 2
#      devices under a memory budget that cuts every model into shards;
#   7. pipemem plan: the Controllable Memory paper's 9.6B GPT on 16 GPUs of
#      80 GB, every schedule kind with each device's memory by kind, its
#      step and MFU, as a table and as the memory-throughput plane (SVG).
# Everything lands in out/demo/ (PM_DEMO_OUT overrides; PM_DEMO_STEPS sets
# the length of the main run).
set -eu
cd "$(dirname "$0")/.."
BIN=${PM_BIN:-build/pipemem}
OUT=${PM_DEMO_OUT:-out/demo}
STEPS=${PM_DEMO_STEPS:-600}
MODEL="--layers 4 --dim 256 --heads 8 --ctx 128 --batch 16 --microbatches 8"
WL=6 WD=192 WH=6 WT=64 WB=16 WK=8 WV=2000   # act 2's GPT and its vocabulary (act 1)
WMODEL="--layers $WL --dim $WD --heads $WH --ctx $WT --batch $WB --microbatches $WK"
LIMIT=0.5   # x M: half of 1F1B's activation memory
mkdir -p "$OUT"

echo "== 1. corpus: /usr/share/games/fortunes, a SentencePiece tokenizer trained on it"
TEXT=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
[ -n "$TEXT" ] || { echo "demo: no fortunes found (apt-get install fortunes)" >&2; exit 1; }
# shellcheck disable=SC2086
"$BIN" tokenizer train $TEXT --vocab "$WV" -o "$OUT/fortunes.model"
# shellcheck disable=SC2086
"$BIN" prepare $TEXT -o "$OUT/words" --tokenizer "$OUT/fortunes.model"
# shellcheck disable=SC2086
"$BIN" prepare $TEXT -o "$OUT/data"    # bytes, for acts 3, 4 and 6

echo
echo "== 2. train: GPT $WMODEL on 4 device threads, --schedule auto --mem-limit $LIMIT"
echo "   (1F1B, the peer, runs 3 steps first so its measured peak can be compared)"
peak() { sed -n "s/.*\"$1\": \[\([^]]*\)\].*/\1/p" | tr ',' '\n' | sort -n | tail -1; }
# shellcheck disable=SC2086
ref=$("$BIN" train --data "$OUT/words" $WMODEL --pp 4 --schedule 1f1b --steps 3 --eval-every 0 \
    --json 2>/dev/null)
# shellcheck disable=SC2086
main=$("$BIN" train --data "$OUT/words" $WMODEL --pp 4 --schedule auto --mem-limit "$LIMIT" \
    --steps "$STEPS" --eval-every 50 --save "$OUT/gpt.ckpt" --json \
    --timeline "$OUT/auto-measured.svg" --trace "$OUT/auto-trace.json")
p1=$(echo "$ref" | peak peak_activation_bytes)
p2=$(echo "$main" | peak peak_activation_bytes)
k=$(echo "$main" | sed -n 's/.*"schedule": "\([^"]*\)".*/\1/p')
s1=$(echo "$ref" | sed -n 's/.*"measured_step_ms": \([0-9.]*\).*/\1/p')
s2=$(echo "$main" | sed -n 's/.*"measured_step_ms": \([0-9.]*\).*/\1/p')
echo "measured activation peak (largest device): 1f1b $p1 bytes, $k $p2 bytes" \
    "($(awk "BEGIN {printf \"%.0f\", 100 * $p2 / $p1}")% of 1F1B's);" \
    "step (passes) $s1 ms against $s2 ms"
# What the matrices pipemem does not keep would add: attention's T x T per
# layer, sequence and head, and the head's (tokens, vocabulary) probabilities,
# beside M, what one microbatch keeps through the model (the plan's m_bytes).
mbs=$((WB / WK))
m=$("$BIN" plan --pipemem-gpt --layers "$WL" --hidden "$WD" --heads "$WH" --seq "$WT" \
    --vocab "$WV" --pp 4 --mbs "$mbs" --microbatches "$WK" --kind 1f1b --format json 2>/dev/null |
    sed -n 's/.*"m_bytes": \([0-9]*\).*/\1/p' | head -1)
awk -v m="$m" -v l="$WL" -v b="$mbs" -v h="$WH" -v t="$WT" -v v="$WV" 'BEGIN {
    att = l * b * h * t * t * 4; head = b * t * v * 4;
    printf "activation memory: one microbatch keeps %.2f MiB through the model; attention'"'"'s T x T " \
        "matrices and the head'"'"'s N x V probabilities, kept, would add %.2f MiB (%.0f%% more)\n",
        m / 1048576, (att + head) / 1048576, 100 * (att + head) / m }'
echo "sample:"
"$BIN" sample --ckpt "$OUT/gpt.ckpt" --prompt "The" -n 80 --temperature 0.7
echo

BIG="--layers 8 --dim 384 --heads 6 --ctx 64 --batch 8 --microbatches 8"
echo "== 3. a model one device cannot hold: GPT $BIG, --device-mem 128M"
# shellcheck disable=SC2086
if "$BIN" train --data "$OUT/data" $BIG --steps 6 --device-mem 128M 2> "$OUT/one.err"; then
    echo "demo: one device should have been refused" >&2
    exit 1
fi
cat "$OUT/one.err"
echo "   the same model on 4 device threads, each holding only its stages:"
# shellcheck disable=SC2086
big=$("$BIN" train --data "$OUT/data" $BIG --pp 4 --steps 6 --eval-every 0 --device-mem 128M \
    --save "$OUT/big.ckpt" --json 2> "$OUT/big.err")
grep -E '^device [0-9]: layers' "$OUT/big.err"
rss=$(echo "$big" | sed -n 's/.*"peak_rss_bytes": \[\([0-9]*\)\].*/\1/p')
mib=$(awk "BEGIN {printf \"%.0f\", $rss / 1048576}")
loss=$(echo "$big" | sed -n 's/.*"final_loss": \([0-9.]*\).*/\1/p')
echo "trained: final loss $loss; the whole process, 4 devices, peaked at $mib MiB;"
echo "the checkpoint was written by stage: $OUT/big.ckpt"
echo

echo "== 4. measured against forecast, p = 2, m = 8 (6 steps each, means after the first)"
echo "   forecast: made before each step from the steps before it; replay: the simulator"
echo "   fed with the same step's measured pass times (a check of the executor)"
field() { sed -n "s/.*\"$1\": \([^,}]*\).*/\1/p"; }
peak() { sed -n "s/.*\"$1\": \[\([^]]*\)\].*/\1/p" | tr ',' '\n' | sort -n | tail -1; }
printf '%-8s %9s %9s %9s %8s %8s %11s %11s %s\n' schedule step_ms forecast replay bubble \
    replay peak_bytes pred_bytes losses
for k in gpipe 1f1b zb-h1 zb-h2 zb-v v-min v-half v-zb; do
    # shellcheck disable=SC2086
    j=$("$BIN" train --data "$OUT/data" $MODEL --pp 2 --schedule "$k" --steps 6 \
        --eval-every 0 --json 2>/dev/null)
    printf '%-8s %9.1f %9.1f %9.1f %8.4f %8.4f %11d %11d %s\n' "$k" \
        "$(echo "$j" | field measured_step_ms)" "$(echo "$j" | field forecast_step_ms)" \
        "$(echo "$j" | field replay_step_ms)" \
        "$(echo "$j" | field measured_bubble)" "$(echo "$j" | field predicted_bubble)" \
        "$(echo "$j" | peak peak_activation_bytes)" \
        "$(echo "$j" | peak predicted_peak_activation_bytes)" \
        "final $(echo "$j" | field final_loss)"
done
echo "(every schedule computes the same training: the final losses agree bitwise; at p = 2 the"
echo " V schedules keep 1F1B's memory, their savings grow with p: see docs/runtime.md, bench_pp)"
echo

COSTS=4959,5217,3519,213   # F, B, W, C in microseconds, unequal as in real models
echo "== 5. pipemem compare -p 8 -m 24 --costs $COSTS"
"$BIN" compare -p 8 -m 24 --costs "$COSTS"
for k in 1f1b zb-h1 v-half v-min; do
    "$BIN" schedule --kind "$k" -p 8 -m 24 --costs "$COSTS" --format svg -o "$OUT/$k.svg"
done
echo

SEL="--lr 1e-3,3e-3 --layers 2,4 --dim 128 --heads 4 --ctx 64 --batch 8 --microbatches 2"
echo "== 6. pipemem select: 4 models at once on 2 devices of 14 MiB each (shard parallelism)"
# shellcheck disable=SC2086
"$BIN" select --data "$OUT/data" --devices 2 --device-mem 14M $SEL --steps 60 --dry-run | head -6
# shellcheck disable=SC2086
"$BIN" select --data "$OUT/data" --devices 2 --device-mem 14M $SEL --steps 60 \
    --save-best "$OUT/best.ckpt" --csv "$OUT/select.csv" --timeline "$OUT/select.svg"
echo
echo "demo output in $OUT/: auto-measured.svg (the real run), auto-trace.json (Perfetto),"
echo "  1f1b.svg zb-h1.svg v-half.svg v-min.svg (simulated timelines), gpt.ckpt, big.ckpt, data/,"
echo "  best.ckpt, select.csv and select.svg (model selection)"
echo

PLAN96="--layers 30 --hidden 5120 --heads 40 --seq 1024 --vocab 51200 --mbs 2 --devices 16 \
  --pp 16 --microbatches 64 --device-mem 80G --device-tflops 312"
echo "== 7. pipemem plan: the Controllable Memory paper's 9.6B GPT on 16 A100s of 80 GB"
echo "   (its Figure 7 setting; docs/plan.md sets the planner beside the paper's figures)"
# shellcheck disable=SC2086
"$BIN" plan $PLAN96
# shellcheck disable=SC2086
"$BIN" plan $PLAN96 --format svg -o "$OUT/plan-9.6b.svg"
echo "the memory-throughput plane, each kind's point and the Pareto front: $OUT/plan-9.6b.svg"
