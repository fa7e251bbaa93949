#!/usr/bin/env bash
# Long CPU trainings in the background, resumable after a restart or on another machine.
#
#   scripts/train_queue.sh JOBS LOGDIR NAME
#
# JOBS: one `python -m frost_nb` call a line, quoted as in a shell (e.g. "grid collapse --dataset
# cifar100 --seeds 0 --labels 'recurrent (ranking)'"); blank lines and lines starting with # are
# skipped. Each worker (NAME: A, B, ...) claims the next line no worker has claimed yet (mkdir
# LOGDIR/claim.N, atomic), runs it to the end, and takes the next; one worker per core, one thread each:
#
#   export FROST_CACHE=${FROST_CACHE:-outputs/cache} OMP_NUM_THREADS=1 LOGS=${LOGS:-outputs/tmp/logs}
#   mkdir -p "$LOGS"; for w in A B; do setsid nohup scripts/train_queue.sh jobs.txt "$LOGS" $w \
#       >> "$LOGS/$w.log" 2>&1 < /dev/null & done
#
# Every run saves a full checkpoint after each epoch (and every 10 minutes within a long one) in
# $FROST_CACHE/<grid>/<label>/model.pt and resumes from it, and a finished run is loaded, not
# retrained: after a restart remove LOGDIR's claim.* folders and start the workers again. To keep
# edits of the working tree from reaching a running job, run the workers from a frozen checkout
# (git worktree add --detach ../train HEAD; cd there, PYTHONPATH=. and FROST_DATA=<the data root>).
# Work that may lose its machine keeps the states of unfinished runs in outputs/partial/ (its README).
set -u
# glibc keeps freed memory in the heap rather than mapping and zero-filling the step's large tensors
# afresh each time (benchmarks/cpu_allocator.py's ALLOCATOR_ENV; docs/scaling.md): a run then holds
# its peak memory until it ends
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-4294967296} MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-68719476736}
jobs=$1 logdir=$2 name=$3
py=${PY:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
mkdir -p "$logdir"
n=0
while IFS= read -r job || [ -n "$job" ]; do
  n=$((n + 1))
  case "$job" in ""|\#*) continue ;; esac
  mkdir "$logdir/claim.$n" 2>/dev/null || continue
  echo "$(date -u +%FT%TZ) worker $name starts job $n: $job"
  eval "set -- $job"  # the line's words, shell quoting kept: --labels "recurrent (ranking)"
  "$py" -m frost_nb "$@" --no-progress
  echo "$(date -u +%FT%TZ) worker $name ends job $n (exit $?)"
done < "$jobs"
