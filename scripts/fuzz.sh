#!/bin/sh
# Coverage-guided fuzzing of the parsers (docs/fuzzing.md).
#
#   sh scripts/fuzz.sh [run]   each target for FUZZ_SECONDS (60), FUZZ_JOBS at
#                              once (the number of CPUs); fails on any report
#   sh scripts/fuzz.sh merge   adds what the runs found that reaches new code
#                              to the committed corpora (tests/fuzz/corpus)
#   sh scripts/fuzz.sh coverage   line coverage of each target's own source
#                              files by its committed corpus and the runs'
#
# FUZZ_TARGETS picks targets (default: every one with a committed corpus).
# Runs keep what they find in build-fuzz/fuzz/work/NAME, so a second run
# goes on from the first; a report (crash, leak, broken invariant, timeout)
# leaves its input in build-fuzz/fuzz/findings/NAME/.
set -eu
cd "$(dirname "$0")/.."
mode=${1:-run}
secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-$(nproc)}
B=${FUZZ_BUILD:-build-fuzz}
C=${COV_BUILD:-build-cov}
F=tests/fuzz
targets=${FUZZ_TARGETS:-$(ls $F/corpus)}
# a UBSan report is recoverable unless told otherwise: make it one that
# ends the run (libFuzzer then saves the input), like ASan's
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

[ "$mode" = one ] || sh scripts/deps.sh fuzz

# the source files each target is about (coverage is reported on these)
sources() {
    case $1 in
    proxy-head) echo src/proxy/request.c ;;
    sni) echo src/proxy/sni.c ;;
    addr) echo src/proxy/addr.c src/proxy/policy.c ;;
    dns) echo src/proxy/resolve.c ;;
    mcp) echo src/api/mcp_rpc.c ;;
    skill-manifest) echo src/core/skill_manifest.c ;;
    skill-bundle) echo src/core/skill_bundle.c ;;
    dlp) echo src/core/dlp.c ;;
    names | collect) echo src/box/collect.c ;;
    text) echo src/util/util.c ;;
    settings) echo src/core/settings.c ;;
    image-import) echo src/image/import.c ;;
    helper-events) echo src/core/helper_events.c ;;
    job) echo src/drivers/job_codec.c ;;
    kube-watch) echo src/kube/watch.c ;;
    kube-log) echo src/kube/logs.c src/kube/collect.c src/box/untar.c ;;
    run-body) echo src/api/run_body.c src/core/run_spec.c ;;
    piston-body) echo src/api/piston.c src/api/run_body.c src/core/run_spec.c ;;
    *) echo "fuzz: no source files listed for $1 (scripts/fuzz.sh: sources)" >&2; return 1 ;;
    esac
}

fuzz_one() {
    t=$1
    exe=$B/tests/fuzz/fuzz-$t
    work=$B/fuzz/work/$t
    found=$B/fuzz/findings/$t
    log=$B/fuzz/logs/$t.log
    mkdir -p "$work" "$found" "$B/fuzz/logs"
    set -- -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$found/"
    [ -f $F/dict/$t.dict ] && set -- "$@" -dict=$F/dict/$t.dict
    set -- "$@" "$work" $F/corpus/$t
    [ -d $F/regress/$t ] && set -- "$@" $F/regress/$t
    if "$exe" "$@" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        runs=${runs:-0}
        cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
        printf 'fuzz: %-15s %ss, %s inputs (%s/s), %s, %s in its work corpus\n' "$t" "$secs" "$runs" \
            "$((runs / secs))" "$cov" "$(ls "$work" | wc -l)"
    else
        echo "fuzz: $t REPORTED (its input is in $found/):"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|fuzz invariant)|runtime error' "$log" | head -5
        return 1
    fi
}

# in a function, so the shell has read all of it before any of it runs, and
# it exits on the line that calls it (an edit to this file during a long
# run must not change what the running shell reads next; each target's
# "one" run reads the file as it is when that target starts)
main() {
    case $mode in
    run)
        [ -f $B/build.ninja ] || CC=clang-14 meson setup $B -Dfuzzing=true -Db_sanitize=address,undefined \
            -Db_lundef=false -Dbuildtype=debugoptimized >/dev/null
        sh scripts/web.sh   # the console's highlight.js, which every build embeds
        ninja -C $B >/dev/null
        # FUZZ_JOBS targets at once, each on one core
        status=0
        printf '%s\n' $targets | xargs -P "$jobs" -I{} sh scripts/fuzz.sh one {} || status=1
        [ $status -eq 0 ] && echo "fuzz: no report" || echo "fuzz: reports found (see above)"
        exit $status
        ;;
    one)
        fuzz_one "$2"
        ;;
    merge)
        [ -f $B/build.ninja ] || { echo "fuzz: nothing to merge: run make fuzz first" >&2; exit 1; }
        ninja -C $B >/dev/null
        for t in $targets; do
            [ -d $B/fuzz/work/$t ] || continue
            before=$(ls $F/corpus/$t | wc -l)
            $B/tests/fuzz/fuzz-$t -merge=1 -rss_limit_mb=2048 $F/corpus/$t $B/fuzz/work/$t >$B/fuzz/logs/$t.merge.log 2>&1 ||
                { echo "fuzz: $t: the merge failed (see $B/fuzz/logs/$t.merge.log)" >&2; exit 1; }
            echo "fuzz: $t: corpus $before -> $(ls $F/corpus/$t | wc -l) inputs"
        done
        ;;
    coverage)
        [ -f $C/build.ninja ] || CC=clang-14 CFLAGS="-fprofile-instr-generate -fcoverage-mapping" \
            LDFLAGS="-fprofile-instr-generate" meson setup $C -Dbuildtype=debug >/dev/null
        sh scripts/web.sh
        ninja -C $C >/dev/null
        for t in $targets; do
            rm -rf "$C/prof/$t" && mkdir -p "$C/prof/$t"
            set -- $F/corpus/$t
            [ -d $F/regress/$t ] && set -- "$@" $F/regress/$t
            [ -d $B/fuzz/work/$t ] && [ -n "$(ls $B/fuzz/work/$t)" ] && set -- "$@" $B/fuzz/work/$t
            LLVM_PROFILE_FILE="$C/prof/$t/%p.profraw" $C/tests/fuzz/fuzz-$t "$@" >/dev/null
            llvm-profdata-14 merge -sparse "$C/prof/$t"/*.profraw -o "$C/prof/$t.profdata"
            # shellcheck disable=SC2046
            llvm-cov-14 report $C/tests/fuzz/fuzz-$t -instr-profile="$C/prof/$t.profdata" $(sources "$t") |
                awk -v t="$t" -v want="$(sources "$t")" '
                    BEGIN { n = split(want, w, " ") }
                    { for (i = 1; i <= n; i++) if (length($1) >= length(w[i]) && substr($1, length($1) - length(w[i]) + 1) == w[i])
                          printf "coverage: %-15s %-32s lines %s, functions %s, branches %s\n", t, w[i], $10, $7, $13 }'
        done
        ;;
    *)
        echo "usage: sh scripts/fuzz.sh [run|merge|coverage]" >&2
        exit 2
        ;;
    esac
}

main "$@"; exit $?
