#!/usr/bin/env bash
# Runs //examples:train on the ToyModel and on an MLP classifier and checks that the runs
# succeed, that the loss falls, and that bad arguments fail with a message.
set -euo pipefail
train="$1"
dir="${TEST_TMPDIR:-/tmp}"

check_falls() {  # metrics.csv: the mean of the last 10 losses must be below 0.8 x the first
  awk -F, 'NR == 2 { first = $2 } NR > 1 { n++; loss[n] = $2 }
           END { s = 0; for (i = n - 9; i <= n; i++) s += loss[i]; last = s / 10;
                 printf "first loss %f, mean of the last ten %f\n", first, last;
                 exit !(last < 0.8 * first) }' "$1"
}

"$train" --model toy --steps 100 --metrics "$dir/toy.csv" --save "$dir/toy.safetensors"
test "$(wc -l < "$dir/toy.csv")" -eq 101
check_falls "$dir/toy.csv"
test -s "$dir/toy.safetensors"
# Continue from the saved weights.
"$train" --model toy --steps 5 --init "$dir/toy.safetensors" --log_every 1 | grep -q "step 5/5"

"$train" --model mlp --widths 16,32,4 --steps 60 --lr 0.1 --momentum 0.9 --metrics "$dir/mlp.csv" | tee "$dir/mlp.log"
check_falls "$dir/mlp.csv"
grep -q "accuracy on the last batch" "$dir/mlp.log"

# Bad input gives an error message and a failing exit status.
if "$train" --model resnet 2> "$dir/err.txt"; then echo "accepted --model resnet"; exit 1; fi
grep -q "model" "$dir/err.txt"
if "$train" --model toy --init "$dir/mlp.csv" 2> "$dir/err.txt"; then echo "accepted a CSV as --init"; exit 1; fi
grep -q "train: error: safetensors" "$dir/err.txt"
if "$train" --model mlp --widths 16,4 --init "$dir/toy.safetensors" 2> "$dir/err.txt"; then echo "accepted wrong weights"; exit 1; fi
grep -q "missing key(s)" "$dir/err.txt"
echo "train_test: ok"
