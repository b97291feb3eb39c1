#!/usr/bin/env python3
"""Renders tests/fixtures/chat_templates/*.jinja on conversations.json with Python jinja2, set up
as transformers' apply_chat_template sets it up (ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and loopcontrols; its tojson, raise_exception and strftime_now), and writes
expected.json, which tests/unit/text/chat_template_test.cc compares moegraph's renderer with.

    /work/.venv-hf/bin/python tools/hf/make_chat_template_expected.py   # any python with jinja2

strftime_now is pinned to 2025-03-14 12:00 so the expected text does not depend on the day.
`--check FILE.jinja ...` renders other templates (e.g. a checkpoint's real chat_template, saved
to a file) and prints the expected JSON for them instead of writing the fixture.
"""
import argparse
import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "chat_templates"
NOW = datetime.datetime(2025, 3, 14, 12, 0, 0)

# Special tokens of each family's tokenizer_config.json (what bos_token / eos_token render as).
SPECIAL = {
    "qwen2_moe": ("", "<|im_end|>"),
    "qwen3_moe": ("", "<|im_end|>"),
    "deepseek_v2": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek_v3": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "gpt_oss": ("<|startoftext|>", "<|return|>"),
    "llama4": ("<|begin_of_text|>", "<|eot|>"),
    "olmoe": ("<|endoftext|>", "<|endoftext|>"),
    "granitemoe": ("<|end_of_text|>", "<|end_of_text|>"),
    "mixtral": ("<s>", "</s>"),
}


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


def render_all(template_text, bos, eos, conversations):
    template = environment().from_string(template_text)
    cases = []
    for conv in conversations:
        kwargs = dict(conv.get("kwargs", {}))
        kwargs.update(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                      add_generation_prompt=conv.get("add_generation_prompt", True),
                      bos_token=bos, eos_token=eos)
        try:
            cases.append({"conversation": conv["name"], "text": template.render(**kwargs)})
        except Exception as e:  # a template's raise_exception, or a render error
            # raise_exception raises the bare TemplateError; its message must come through.
            raised = type(e) is jinja2.exceptions.TemplateError
            cases.append({"conversation": conv["name"], "error": str(e), "raised": raised})
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", nargs="*", help="render these template files, print JSON")
    args = ap.parse_args()
    conversations = json.loads((HERE / "conversations.json").read_text())
    if args.check:
        out = {p: render_all(pathlib.Path(p).read_text(), "<s>", "</s>", conversations)
               for p in args.check}
        json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
        return
    families = {}
    for name, (bos, eos) in SPECIAL.items():
        families[name] = {"bos_token": bos, "eos_token": eos,
                          "cases": render_all((HERE / f"{name}.jinja").read_text(), bos, eos,
                                              conversations)}
    out = {"jinja2_version": jinja2.__version__, "now": NOW.isoformat(), "families": families}
    (HERE / "expected.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {HERE / 'expected.json'}")


if __name__ == "__main__":
    main()
