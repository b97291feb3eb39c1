#!/usr/bin/env python3
"""Talks to a running `moegraph serve` with the real `openai` client (and plain HTTP for what the
client cannot send). Run by tests/e2e/server_openai_test.cc, which starts the server on a free
loopback port; by hand:

    moegraph serve --port 8000 &  python3 tests/e2e/openai_client_check.py http://127.0.0.1:8000

Exits non-zero with the failing check's message. Greedy decoding (temperature 0) makes every
request's text a function of its prompt, so streams, concurrent clients and stop strings are
compared with one plain request's text.
"""
import concurrent.futures
import json
import sys
import time
import urllib.error
import urllib.request

import openai

BASE = sys.argv[1].rstrip("/")
client = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=120)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


def health():
    with urllib.request.urlopen(BASE + "/health", timeout=30) as r:
        return json.loads(r.read())


def raw_post(path, body):
    req = urllib.request.Request(BASE + path, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def expect_error(fn, error_type, status, param=None, code=None):
    try:
        fn()
    except error_type as e:
        check(e.status_code == status, f"status {e.status_code}, expected {status}: {e}")
        err = e.body if isinstance(e.body, dict) else {}
        check(isinstance(err.get("message"), str) and err["message"], f"no message in {e.body}")
        if param is not None:
            check(err.get("param") == param, f"param {err.get('param')!r}, expected {param!r}")
        if code is not None:
            check(err.get("code") == code, f"code {err.get('code')!r}, expected {code!r}")
        return
    raise AssertionError(f"expected {error_type.__name__} ({status})")


# ---- /v1/models, /health ------------------------------------------------------------------------
models = client.models.list().data
check(len(models) == 1, f"one model expected, got {models}")
MODEL = models[0].id
h = health()
check(h["status"] == "ok" and h["model"] == MODEL, f"health: {h}")
MAX_LEN = models[0].model_extra["max_model_len"]

# ---- completions ----------------------------------------------------------------------------------
def complete(prompt, max_tokens=12, **kw):
    kw.setdefault("temperature", 0)
    return client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens, **kw)


r = complete("The quick brown fox")
text = r.choices[0].text
check(r.object == "text_completion" and r.model == MODEL, f"completion object: {r}")
check(r.choices[0].finish_reason == "length", f"finish_reason {r.choices[0].finish_reason}")
check(r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 0, f"usage {r.usage}")
check(r.usage.total_tokens == r.usage.prompt_tokens + 12, f"usage {r.usage}")
check(complete("The quick brown fox").choices[0].text == text, "greedy is not deterministic")

ids = [10, 20, 30, 40, 50]
r_ids = complete(ids)
check(r_ids.usage.prompt_tokens == len(ids), f"token-id prompt usage {r_ids.usage}")
check(complete([ids]).choices[0].text == r_ids.choices[0].text, "[[ids]] differs from [ids]")
echo = complete("Echo me", max_tokens=3, echo=True).choices[0].text
check(echo.startswith("Echo me"), f"echo: {echo!r}")

# Streaming gives the same text in pieces, then the finish reason, then (asked for) the usage.
pieces, finishes, usage = [], [], None
for chunk in complete("The quick brown fox", stream=True, stream_options={"include_usage": True}):
    if chunk.usage is not None:
        usage = chunk.usage
    for c in chunk.choices:
        pieces.append(c.text)
        finishes.append(c.finish_reason)
check("".join(pieces) == text, f"stream {''.join(pieces)!r} != {text!r}")
check(finishes[-1] == "length" and all(f is None for f in finishes[:-1]), f"finishes {finishes}")
check(usage is not None and usage.completion_tokens == 12, f"stream usage {usage}")

# A stop string: the text up to its first occurrence, finish_reason "stop".
long_text = complete("Stop strings", max_tokens=24).choices[0].text
if len(long_text) >= 8:
    stop = long_text[4:7]
    cut = long_text[: long_text.find(stop)]
    r_stop = complete("Stop strings", max_tokens=24, stop=[stop])
    check(r_stop.choices[0].text == cut, f"stop {stop!r}: {r_stop.choices[0].text!r} != {cut!r}")
    check(r_stop.choices[0].finish_reason == "stop", f"stop finish {r_stop.choices[0].finish_reason}")
    streamed = "".join(c.choices[0].text for c in complete("Stop strings", max_tokens=24, stop=stop,
                                                           stream=True) if c.choices)
    check(streamed == cut, f"streamed stop: {streamed!r} != {cut!r}")

# ---- chat -------------------------------------------------------------------------------------------
messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}]
chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, temperature=0)
content = chat.choices[0].message.content
check(chat.object == "chat.completion" and chat.choices[0].message.role == "assistant", f"{chat}")
check(chat.usage.completion_tokens == 10, f"chat usage {chat.usage}")
deltas, roles = [], []
for chunk in client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10,
                                            temperature=0, stream=True):
    d = chunk.choices[0].delta
    if d.role:
        roles.append(d.role)
    if d.content:
        deltas.append(d.content)
check(roles == ["assistant"], f"roles {roles}")
check("".join(deltas) == content, f"chat stream {''.join(deltas)!r} != {content!r}")
parts = client.chat.completions.create(
    model=MODEL, max_tokens=10, temperature=0,
    messages=[messages[0], {"role": "user", "content": [{"type": "text", "text": "Hi!"}]}])
check(parts.choices[0].message.content == content, "text parts differ from a string content")

# ---- errors -----------------------------------------------------------------------------------------
expect_error(lambda: client.completions.create(model="no-such-model", prompt="x", max_tokens=1),
             openai.NotFoundError, 404, param="model", code="model_not_found")
expect_error(lambda: complete("x", temperature=3), openai.BadRequestError, 400, param="temperature")
expect_error(lambda: complete("x", top_p=0), openai.BadRequestError, 400, param="top_p")
expect_error(lambda: complete("x", max_tokens=MAX_LEN + 1), openai.BadRequestError, 400, param="prompt",
             code="context_length_exceeded")
expect_error(lambda: complete("x", max_tokens=0), openai.BadRequestError, 400, param="max_tokens")
expect_error(lambda: complete([1, 2, 10**6]), openai.BadRequestError, 400, param="prompt")
expect_error(lambda: client.chat.completions.create(model=MODEL, messages=[], max_tokens=1),
             openai.BadRequestError, 400, param="messages")
expect_error(lambda: client.completions.create(model=MODEL, prompt="x", n=2, max_tokens=1),
             openai.BadRequestError, 400, param="n")
status, body = raw_post("/v1/completions", b"{not json")
check(status == 400 and body["error"]["type"] == "invalid_request_error", f"bad JSON: {body}")
status, body = raw_post("/v1/chat/completions", b"[1, 2]")
check(status == 400 and "object" in body["error"]["message"], f"array body: {body}")
status, body = raw_post("/v1/nothing", b"{}")
check(status == 404 and "error" in body, f"unknown route: {status} {body}")

# ---- 32 concurrent streaming clients ----------------------------------------------------------------
prompts = [f"Client {i} says" for i in range(4)]
want = {p: complete(p, max_tokens=16).choices[0].text for p in prompts}


def stream_one(i):
    p = prompts[i % len(prompts)]
    got = "".join(c.choices[0].text for c in complete(p, max_tokens=16, stream=True) if c.choices)
    return p, got


with concurrent.futures.ThreadPoolExecutor(32) as pool:
    results = list(pool.map(stream_one, range(32)))
for p, got in results:
    check(got == want[p], f"concurrent stream for {p!r}: {got!r} != {want[p]!r}")

# ---- a client that disconnects mid-stream -----------------------------------------------------------
before = health()["disconnected_requests"]
stream = complete("Disconnect", max_tokens=MAX_LEN - 64, stream=True)
seen = 0
for chunk in stream:
    seen += 1
    if seen == 3:
        break
stream.close()  # closes the connection with the sequence still generating
deadline = time.time() + 60
while True:
    h = health()
    if (h["disconnected_requests"] == before + 1 and h["active_requests"] == 0 and
            h["running"] == 0 and h["waiting"] == 0):
        break
    check(time.time() < deadline, f"the disconnected sequence was not freed: {h}")
    time.sleep(0.05)
check(h["slots_free"] == h["slots_total"], f"slots leaked: {h}")
check(h["kv_blocks_free"] == h["kv_blocks_total"], f"KV blocks leaked: {h}")
check(complete("After").choices[0].finish_reason == "length", "server unusable after disconnect")

print(f"openai_client_check: {checks} checks passed against {MODEL} at {BASE}")
