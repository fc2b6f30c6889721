#!/bin/sh
# A scripted coding agent for tests/campaign/test_command_campaign.cpp. The campaign's command
# agent runs it in its workspace (TASK.md, src/ = the CPU baseline's sources, `hotpass submit` on
# PATH). It makes three real source edits and submits each, appending `NAME EXIT_CODE` of
# `hotpass submit` to results.txt:
#   good   a comment appended to forward.cpp: still correct (faster or not_faster)
#   build  a line that is not C++: build_failed
#   wrong  every logit scaled by 1.5: a wrong-result verdict
set -u
grep -q "as fast as possible" TASK.md || { echo "TASK.md does not state the goal" >&2; exit 10; }
command -v hotpass >/dev/null || { echo "hotpass is not on PATH" >&2; exit 11; }

cp -R src good
printf '\n// a harmless edit by the scripted agent\n' >> good/forward.cpp
hotpass submit good > good.verdict
echo "good $?" >> results.txt

cp -R src build
printf '\nthis line is not C++;\n' >> build/forward.cpp
hotpass submit build > build.verdict
echo "build $?" >> results.txt

cp -R src wrong
perl -0pi -e 's/(\{out->logits, c\.n_vocab, false\}, state\.matmul_scratch\[thread\]\);\n    \}\);\n)/$1    for (int64_t i = 0; i < n_logit * c.n_vocab; ++i) out->logits[i] *= 1.5f;\n/' wrong/forward.cpp
grep -q 'logits\[i\] \*= 1.5f' wrong/forward.cpp || { echo "the logit-scaling edit did not apply" >&2; exit 12; }
hotpass submit wrong > wrong.verdict
echo "wrong $?" >> results.txt
