#!/usr/bin/env bash
# Runs the real Inloop window under Xvfb, drives it with xdotool as a person would
# (a chat of a few turns, a data file opened, a training run in progress, the run
# history), and writes a PNG of every screen to the folder given (default
# ./screenshots). Linux only. Installs Xvfb, xdotool and ImageMagick if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-screenshots}")
mkdir -p "$out"
bash scripts/deps.sh
need=()
for p in xvfb xauth libgl1-mesa-dri imagemagick x11-utils xdotool; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/inloop" .
export INLOOP_HOME="$work/home" LANG=en_US.UTF-8

# Training data: paragraphs of a license text, one JSONL row each.
awk 'BEGIN{RS=""} {gsub(/["\\]/,""); gsub(/[ \t\n]+/," "); if (length($0) > 80) printf "{\"text\": \"%s\"}\n", $0}' \
  /usr/share/common-licenses/GPL-3 | head -120 > "$work/licenses.jsonl"
# A finished run for the history.
"$work/inloop" train --model demo --data "$work/licenses.jsonl" --iters 40 --batch-size 2 --max-seq-length 128 \
  --learning-rate 5e-4 --steps-per-report 4 --steps-per-eval 10 >/dev/null
# A decision model on the sample tickets, for the Decide screen.
"$work/inloop" decide train --model demo --task tickets --max-train-rows 200 --iters 40 --steps-per-eval 10 >/dev/null

Xvfb :97 -screen 0 1280x800x24 >/dev/null 2>&1 &
pids+=($!)
export DISPLAY=:97
sleep 1
"$work/inloop" >"$work/app.log" 2>&1 &
pids+=($!)
win=$(xdotool search --sync --name '^Inloop$' | head -1)
sleep 3
shot() { sleep "${2:-1}"; import -window "$win" "$out/$1.png"; echo "$out/$1.png"; }
click() { xdotool mousemove --window "$win" "$1" "$2" click 1; sleep 0.4; }
tab() { case $1 in Chat) click 33 50;; Models) click 33 125;; Data) click 33 210;; Train) click 33 295;; Decide) click 33 375;; Adapt) click 33 460;; Runs) click 33 545;; esac; }
typeline() { xdotool type --delay 15 "$1"; xdotool key Return; }

tab Chat
click 540 688
for q in "What does a hacker do all day?" "Tell me about computers." "Why do programs have bugs?"; do
  typeline "$q"; sleep 5
done
shot chat

tab Models; shot models

tab Data
click 620 61
typeline "$work/licenses.jsonl"
shot data 3

tab Train
click 300 60
xdotool type --delay 5 "$work/licenses.jsonl"
click 300 100; xdotool key ctrl+a; xdotool type "2000"
click 300 295; xdotool key ctrl+a; xdotool type "256"
click 130 335
shot train 15

tab Decide
click 280 518; click 200 552   # open the trained decision model
shot decide-calibration 10
click 684 22; click 780 100
xdotool type --delay 5 "Hi, I was charged twice for the March invoice and the app also crashes when I open settings. Please refund the duplicate charge. Thanks, Dana"
click 526 177
shot decide-try 60             # the anchor set is scored before thumbs are on

tab Runs
click 230 70
shot runs 2
