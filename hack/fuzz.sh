#!/usr/bin/env bash
# Runs Go fuzz targets one after another with execution-count budgets, and on a failure
# tells a finding in the code (a reproducer under testdata/fuzz/) from a failure of the
# toolchain or the build (none written), so neither is mistaken for the other.
#
# Usage: hack/fuzz.sh <factor> <minimize-execs> <FuzzName>:<package>:<execs>...
#   each target runs <execs> × <factor> executions (-fuzztime=Nx) and minimizes a new
#   input for at most <minimize-execs> executions (-fuzzminimizetime=Nx).
# GO names the go command (default: go).
set -o errexit -o nounset -o pipefail

usage() {
  echo "usage: $0 <factor> <minimize-execs> <FuzzName>:<package>:<execs>..." >&2
  exit 2
}

is_count() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }

(($# >= 3)) || usage
factor=$1 minimize=$2
shift 2
is_count "${factor}" || { echo "factor must be a positive integer, got '${factor}'" >&2; usage; }
is_count "${minimize}" || { echo "minimize-execs must be a positive integer, got '${minimize}'" >&2; usage; }
go_cmd=${GO:-go}

log=$(mktemp)
trap 'rm -f "${log}"' EXIT

# corpus_files lists the files of a target's corpus directory (none if it does not exist).
corpus_files() {
  if [[ -d $1 ]]; then find "$1" -maxdepth 1 -type f | LC_ALL=C sort; fi
}

findings=() broken=()
for target in "$@"; do
  IFS=: read -r name pkg execs rest <<<"${target}"
  if [[ -z ${name} || -z ${pkg} || -n ${rest} ]] || ! is_count "${execs:-}"; then
    echo "bad target '${target}': want <FuzzName>:<package>:<execs>" >&2
    exit 2
  fi
  budget=$((execs * factor))
  corpus="${pkg#./}/testdata/fuzz/${name}"
  before=$(corpus_files "${corpus}")

  echo "==> ${name} (${pkg}), -fuzztime=${budget}x -fuzzminimizetime=${minimize}x"
  start=${SECONDS}
  rc=0
  "${go_cmd}" test -run '^$' -fuzz "^${name}\$" -fuzztime="${budget}x" -fuzzminimizetime="${minimize}x" "${pkg}" 2>&1 |
    tee "${log}" || rc=$?
  took=$((SECONDS - start))
  if ((rc == 0)); then
    echo "==> ${name}: passed, ${budget} executions in ${took}s"
    continue
  fi

  new=$(LC_ALL=C comm -13 <(echo "${before}") <(corpus_files "${corpus}") | sed '/^$/d')
  if [[ -n ${new} ]]; then
    findings+=("${name}")
    while read -r path; do
      echo "==> ${name}: FAILED after ${took}s, crasher written: ${path} — fix the bug, add a unit test, commit the file as a regression seed"
    done <<<"${new}"
  elif seed=$(grep -m1 -o 'failure while testing seed corpus entry: .*' "${log}"); then
    # An input already in the corpus (testdata/fuzz/ or f.Add) fails, so nothing new is written.
    findings+=("${name}")
    echo "==> ${name}: FAILED after ${took}s, seed corpus entry ${seed##*: } fails — a regression in the code under test; go test -run '${seed##*: }' ${pkg} replays it"
  else
    broken+=("${name}")
    echo "==> ${name}: FAILED after ${took}s WITHOUT writing a reproducer: not a finding in the code under test (toolchain/infrastructure failure, e.g. golang/go#75804 or a build error); output above"
  fi
done

if ((${#findings[@]} + ${#broken[@]} > 0)); then
  ((${#findings[@]} == 0)) || echo "fuzz: findings in the code under test: ${findings[*]}"
  ((${#broken[@]} == 0)) || echo "fuzz: failed without a reproducer (not a finding; see their output): ${broken[*]}"
  exit 1
fi
echo "fuzz: all $# targets passed"
