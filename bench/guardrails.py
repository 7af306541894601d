"""Benchmark of the whole input-guardrail pass (``GuardrailEngine.screen_input``).

Prints p50/p95 latency in milliseconds on this machine for
1. short single-message prompts, each screened on empty caches (cold: the engine's scan cache
   and the embedding module's text cache are emptied before every prompt);
2. 10-turn conversations where the client resends the whole history every turn (as chat
   clients do), screened with the caches (what the proxy does: each conversation starts on
   empty caches) and with the caches emptied before every turn (every message rescanned):
   the difference is what the scan cache saves.

``--levers`` instead prints, per hot-path lever that an environment switch turns off, the CPU time
(``time.process_time``, all threads) per request with the lever off and on: each setting in a
process of its own (``--cpu-child``), the settings interleaved over ``--rounds`` rounds, medians
quoted. A request is what ``bench/gateway.py`` sends: a fresh prompt (a unique prefix, no cache
answers it) screened by ``screen_input`` and the stub's answer by ``screen_output``.

The engine is built as the proxy builds it (``proxy.evaluation.guardrails.build_engine``: the
policies of config.yaml, litellm's token counter, models loaded and warmed up once).

Usage: ``.venv/bin/python bench/guardrails.py [--config config.yaml] [--repeat 3]``,
``.venv/bin/python bench/guardrails.py --levers [--rounds 5] [--requests 300]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy import offline  # noqa: E402  (offline settings before model imports)

#: Project-written short prompts: everyday, personal data, regulated, unsafe-sounding-but-safe.
SHORT_PROMPTS = [
    "What is the capital of Portugal?",
    "Write a haiku about the sea.",
    "How do I reverse a list in Python?",
    "Summarise the causes of the First World War in three sentences.",
    "My name is Jonas Berg and my phone number is 040 123 4567, can you draft a reply to my landlord?",
    "Please send the invoice to maria.lopez@example.com by Friday.",
    "I live at 12 Rosewood Lane, Springfield. Which bus goes to the airport?",
    "Is it legal to record a phone call without consent in Germany?",
    "What is a safe daily dose of ibuprofen for an adult?",
    "Should I put my savings into an index fund?",
    "How do I kill a zombie process on Linux?",
    "What's the best way to shoot a photo of the moon?",
    "Give me a recipe for a vegetarian lasagne.",
    "Translate 'where is the train station' into French.",
    "Explain how vaccines train the immune system.",
    "Suggest three names for a bakery.",
    "How long should I boil an egg for a soft yolk?",
    "What does HTTP status 418 mean?",
    "Write a short birthday message for my colleague Priya.",
    "Which planets have rings?",
]

ASSISTANT_REPLY = ("Sure. Here is a detailed answer with a few steps, some background and an example "
                   "so you can try it yourself; tell me if you want more detail on any part.")
CONVERSATION_TURNS = [
    "Hi, I'm planning a trip to Lisbon next spring. What should I see?",
    "How many days would you recommend for the city itself?",
    "Which neighbourhood is good to stay in for a first visit?",
    "Can you suggest a day trip from Lisbon by train?",
    "What is the typical weather in April?",
    "Which local dishes should I try?",
    "How do I get from the airport to the centre?",
    "Is it easy to get around without speaking Portuguese?",
    "Recommend a good viewpoint for the sunset.",
    "Make me a short packing list for the trip.",
]


#: Hot-path levers an environment switch turns off: name -> (variable, value off, value on, what it is).
LEVERS = {
    "pii-recognizer-gate": ("SONATE_PII_RECOGNIZER_GATE", "0", "1",
                            "presidio's digit and e-mail recognizers only on texts that hold a digit / an @"),
    "window-first-stage": ("SONATE_WINDOW_GATE", "0", "1",
                           "a sentence window embedded alone only when the whole pass's vectors of its "
                           "word pieces reach the first stage's gate"),
}
#: The request of bench/gateway.py: its small prompt (behind a fresh prefix) and its stub's answer.
GATEWAY_PROMPT = "What is the capital of Portugal?"
GATEWAY_ANSWER = "The capital of Portugal is Lisbon, a city on the Tagus estuary."


def percentiles(seconds: list[float]) -> str:
    """"p50 X ms  p95 Y ms  (n=N)" of durations in seconds."""
    from proxy.evaluation.metrics import latency_summary

    s = latency_summary(seconds)
    return f"p50 {s['p50_ms']:7.1f} ms   p95 {s['p95_ms']:7.1f} ms   (n={s['n']})"


def main() -> int:
    """Build the engine, run both measurements, print the figures; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="config.yaml (default $SONATE_CONFIG or ./config.yaml)")
    parser.add_argument("--repeat", type=int, default=3, help="passes over the prompts / conversations")
    parser.add_argument("--levers", action="store_true", help="CPU per request with each lever off and on")
    parser.add_argument("--rounds", type=int, default=5, help="--levers: interleaved rounds per setting")
    parser.add_argument("--requests", type=int, default=300, help="--levers: requests measured per process")
    parser.add_argument("--cpu-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.levers:
        return _levers(args)

    from proxy.config import load_config
    from proxy.evaluation.guardrails import build_engine
    from proxy.guardrails.cache import ScanCache
    from proxy.server.flow.upstream import Upstream

    offline.configure_tldextract()
    config = load_config(args.config or (ROOT / "config.yaml"))
    t = time.perf_counter()
    engine = build_engine(config.path(config.policies), Upstream(config).count_tokens)
    print(f"engine built in {time.perf_counter() - t:.1f} s; policies: "
          + ", ".join(p.id for p in engine.policies))

    from proxy.guardrails.detectors import embeddings

    def screen(messages: list[dict]) -> float:
        started = time.perf_counter()
        engine.screen_input(messages)
        return time.perf_counter() - started

    def empty_caches() -> None:
        # the engine's scan cache and the embedding module's text cache: every text is new
        engine.cache = ScanCache()
        getattr(embeddings, "_cache", {}).clear()

    if args.cpu_child:
        print(json.dumps({"cpu_ms_per_request": _cpu_per_request(engine, args.requests)}))
        return 0
    _short_prompts(screen, empty_caches, args.repeat)
    _conversations(screen, empty_caches, args.repeat)
    return 0


def _cpu_per_request(engine, requests: int) -> float:
    """CPU milliseconds (all threads) per gateway-shaped request, after 30 unmeasured ones: one of
    :data:`SHORT_PROMPTS` behind a fresh prefix of letters (so the prompts without digits keep none),
    and the stub's answer."""
    def one(i: int) -> None:
        marker = "".join("bcdfghjklmnpqrstvwxz"[int(d)] for d in str(i))
        prompt = f"Request {marker}. {SHORT_PROMPTS[i % len(SHORT_PROMPTS)]}"
        screen = engine.screen_input([{"role": "user", "content": prompt}], side_by_side=False)
        engine.screen_output(GATEWAY_ANSWER, screen.masker)

    for i in range(30):
        one(10**6 + i)
    started = time.process_time()
    for i in range(requests):
        one(i)
    return 1000 * (time.process_time() - started) / requests


def _levers(args) -> int:
    """Each lever off and on, one process per setting, interleaved rounds; prints medians. Returns 0."""
    command = [sys.executable, __file__, "--cpu-child", "--requests", str(args.requests)]
    if args.config:
        command += ["--config", args.config]
    for name, (variable, off, on, what) in LEVERS.items():
        figures: dict[str, list[float]] = {off: [], on: []}
        for _ in range(args.rounds):  # both settings at once: the machine's load weighs on both alike
            running = {value: subprocess.Popen(command, env={**os.environ, variable: value}, text=True,
                                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                       for value in (off, on)}
            for value, child in running.items():
                out, _ = child.communicate()
                if child.returncode:
                    raise SystemExit(f"{name} {variable}={value}: the measuring process failed ({child.returncode})")
                figures[value].append(json.loads(out.strip().splitlines()[-1])["cpu_ms_per_request"])
        before, after = statistics.median(figures[off]), statistics.median(figures[on])
        print(f"lever {name} ({what}): CPU per request {before:.2f} ms without ({variable}={off}), "
              f"{after:.2f} ms with ({variable}={on}), {after - before:+.2f} ms; rounds without "
              + ", ".join(f"{v:.2f}" for v in figures[off]) + "; with " + ", ".join(f"{v:.2f}" for v in figures[on]))
    print(f"machine: {os.cpu_count()} CPUs, 1-min load average {os.getloadavg()[0]:.2f}")
    return 0


def _short_prompts(screen, empty_caches, repeat: int) -> None:
    """Short single prompts, every one on empty caches; prints p50/p95."""
    short: list[float] = []
    for _ in range(repeat):
        for prompt in SHORT_PROMPTS:
            empty_caches()
            short.append(screen([{"role": "user", "content": prompt}]))
    print(f"short prompts, cold cache          {percentiles(short)}")


def _conversations(screen, empty_caches, repeat: int) -> None:
    """A 10-turn conversation screened turn by turn, with and without the scan cache; prints figures."""
    warm: list[float] = []
    cold: list[float] = []
    last_warm: list[float] = []
    last_cold: list[float] = []
    for _ in range(repeat):
        for cached, sink, last in ((True, warm, last_warm), (False, cold, last_cold)):
            empty_caches()
            history: list[dict] = [{"role": "system", "content": "You are a helpful travel assistant."}]
            for turn, text in enumerate(CONVERSATION_TURNS):
                history.append({"role": "user", "content": text})
                if not cached:
                    empty_caches()
                sink.append(screen(history))
                if turn == len(CONVERSATION_TURNS) - 1:
                    last.append(sink[-1])
                history.append({"role": "assistant", "content": ASSISTANT_REPLY})
    print(f"10-turn history, scan cache         {percentiles(warm)}")
    print(f"10-turn history, no cache           {percentiles(cold)}")
    print(f"machine: {os.cpu_count()} CPUs, 1-min load average {os.getloadavg()[0]:.2f} "
          "(other processes on the machine inflate these figures)")
    print(f"10th turn only: cache {1000 * statistics.median(last_warm):.1f} ms, "
          f"no cache {1000 * statistics.median(last_cold):.1f} ms (median)")


if __name__ == "__main__":
    raise SystemExit(main())
