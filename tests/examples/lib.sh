# Shared by the example tests (sourced): checks on an example's output.

# loss_falls <output file> <n> <ratio>: the mean of the last n logged losses
# is below ratio times the mean of the first n (and there are 2n of them).
loss_falls() {
  awk -v n="$2" -v ratio="$3" '
    $1 == "step" && $3 == "loss" { loss[++count] = $4 }
    END {
      if (count < 2 * n) { printf "FAIL: %d step lines, expected at least %d\n", count, 2 * n; exit 1 }
      for (i = 1; i <= n; i++) { first += loss[i]; last += loss[count - n + i] }
      first /= n; last /= n
      printf "mean loss of the first %d steps %.4f, of the last %d %.4f\n", n, first, n, last
      if (!(last < ratio * first)) { printf "FAIL: the loss did not fall below %.2f of its start\n", ratio; exit 1 }
    }' "$1"
}

# value_at_least <output file> <key> <minimum>: the line `<key> <value>` has value >= minimum.
value_at_least() {
  awk -v key="$2" -v min="$3" '
    $1 == key { v = $2; found = 1 }
    END {
      if (!found) { printf "FAIL: no line \"%s <value>\"\n", key; exit 1 }
      printf "%s %s\n", key, v
      if (!(v + 0 >= min + 0)) { printf "FAIL: %s %s is below %s\n", key, v, min; exit 1 }
    }' "$1"
}
