#!/usr/bin/env bash
# Two fresh clones side by side, `make test` started in both at the same moment: both must pass.
# Run by hand (it takes as long as two test suites sharing the machine's cores):
#   bash tests/two_clones.sh            clones HEAD of this checkout twice under /var/tmp
# Each clone gets ../shared beside it (a symlink to this checkout's), as CI has. Prints each run's
# exit code, wall time and last lines; exits non-zero unless both passed. The clones are kept on
# failure (their logs name the failing test) and removed on success.
set -euo pipefail

repo="$(git -C "$(dirname -- "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
work="$(mktemp -d /var/tmp/moeforge-two-clones.XXXXXX)"
chmod 0755 "$work" # as a checkout's parent usually is: tests run scripts as an unprivileged user too
printf 'two_clones.sh: cloning %s (HEAD %s) twice into %s\n' "$repo" "$(git -C "$repo" rev-parse --short HEAD)" "$work"
for i in 1 2; do
    mkdir -p -- "$work/c$i"
    git clone -q -- "$repo" "$work/c$i/main"
    if [[ -d $repo/../shared ]]; then
        ln -s -- "$(cd -- "$repo/../shared" && pwd)" "$work/c$i/shared"
    fi
done

start=$SECONDS
pids=()
for i in 1 2; do
    (
        cd -- "$work/c$i/main"
        t0=$SECONDS
        rc=0
        make test >"$work/c$i.log" 2>&1 || rc=$?
        printf '%s %s\n' "$rc" "$((SECONDS - t0))" >"$work/c$i.result"
    ) &
    pids+=("$!")
done
wait "${pids[@]}"

failed=0
for i in 1 2; do
    read -r rc seconds <"$work/c$i.result"
    printf '\n=== clone %s: make test exited %s after %s s; last lines of %s:\n' "$i" "$rc" "$seconds" "$work/c$i.log"
    tail -n 12 -- "$work/c$i.log"
    ((rc == 0)) || failed=1
done
printf '\ntwo_clones.sh: both started together; all done after %s s\n' "$((SECONDS - start))"
if ((failed)); then
    printf 'two_clones.sh: FAILED; clones kept in %s\n' "$work"
    exit 1
fi
rm -rf -- "$work"
printf 'two_clones.sh: both passed\n'
