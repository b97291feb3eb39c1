#!/usr/bin/env python3
"""Writes the tokenizer parity fixtures under tests/fixtures/tokenizers/.

For each family we import, trains a SMALL BPE tokenizer (a few hundred vocabulary entries) with the
Hugging Face `tokenizers` package on our own text, under that family's normalizer / pre-tokenizer /
decoder / post-processor configuration (the shapes of the real checkpoints' tokenizer.json files);
also two configurations that are no family (behaviors_a/b: the split behaviors and added-token
options the families leave out) and bytes256 (the bundled models' byte-level tokenizer, built, not
trained); and writes

  tests/fixtures/tokenizers/<family>/tokenizer.json   the trained tokenizer
  tests/fixtures/tokenizers/<family>/expected.json    what `tokenizers` makes of the corpus

expected.json holds, for every corpus entry (corpus.json: many scripts, emoji, code, whitespace
runs, special-token text, digit runs, contractions, invalid UTF-8), the ids with and without
special tokens, the decoded text with and without skip_special_tokens, and the chunks DecodeStream
returns step by step; and for a set of seeded random id lists, the decoded text and stream chunks
(byte-level and byte-fallback tokens cut in the middle of characters).

tests/unit/text/tokenizer_parity_test.cc requires the C++ tokenizer to reproduce all of it. CI does
not run this script (the outputs are committed); rerun it after changing the corpus or a config:

    pip install tokenizers && python3 tools/hf/make_tokenizers.py
"""
import json
import os
import random
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
from tokenizers.decoders import DecodeStream

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
VOCAB_SIZE = 420

# The families' split regexes, as their tokenizer.json files write them.
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
         r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_V3 = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]
# DeepSeek-LLM / V2: the Greek Extended range ends are written escaped (U+1F7D, U+1FD3, U+1FDB)
# so an editor's NFC normalisation cannot turn them into lookalikes that make the ranges descend.
DEEPSEEK_V2 = [
    "[\r\n]",
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134"
    "\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    "\\s+$",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
    "\\p{N}+",
]


def split_sequence(patterns, byte_level):
    splits = [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in patterns]
    return pre_tokenizers.Sequence(splits + [byte_level])


def byte_level(add_prefix_space=False, use_regex=False, trim_offsets=False):
    return pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=use_regex,
                                    trim_offsets=trim_offsets)


def template(bos=None, eos=None, tokens=()):
    single = ([bos] if bos else []) + ["$A"] + ([eos] if eos else [])
    pair = single + ["$B:1"] + ([eos] if eos else [])
    return processors.TemplateProcessing(single=" ".join(single), pair=" ".join(pair),
                                         special_tokens=list(tokens))


def families():
    """name -> (pre_tokenizer, normalizer, decoder, byte_level model?, special tokens,
    non-special added tokens, post-processor factory(token->id), BPE options)."""
    bl_decoder = decoders.ByteLevel()
    sp_decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                    decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return {
        # Qwen2/Qwen3(-MoE): NFC, one Split with Qwen's regex, ByteLevel without its own regex.
        "qwen3_moe": dict(
            pre=split_sequence([QWEN2], byte_level()), norm=normalizers.NFC(), dec=bl_decoder,
            special=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            added=["<think>", "</think>"],
            post=lambda ids: processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                  use_regex=False),
            bpe={}),
        # DeepSeek-V2: six Splits (letters by script, punctuation, trailing space, CJK, digits).
        "deepseek_v2": dict(
            pre=split_sequence(DEEPSEEK_V2, byte_level()), norm=None, dec=bl_decoder,
            special=["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"], added=[],
            post=lambda ids: template(bos="<｜begin▁of▁sentence｜>", tokens=[
                ("<｜begin▁of▁sentence｜>", ids["<｜begin▁of▁sentence｜>"])]),
            bpe={}),
        # DeepSeek-V3: three Splits (digit triples, CJK/kana, the main regex).
        "deepseek_v3": dict(
            pre=split_sequence(DEEPSEEK_V3, byte_level()), norm=None, dec=bl_decoder,
            special=["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>"],
            added=["<think>"],
            post=lambda ids: template(bos="<｜begin▁of▁sentence｜>", tokens=[
                ("<｜begin▁of▁sentence｜>", ids["<｜begin▁of▁sentence｜>"])]),
            bpe={}),
        # GPT-OSS (o200k_harmony): o200k's regex.
        "gpt_oss": dict(
            pre=split_sequence([O200K], byte_level()), norm=None, dec=bl_decoder,
            special=["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|message|>"], added=[],
            post=lambda ids: processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                  use_regex=False),
            bpe={"ignore_merges": True}),
        # Llama-4: o200k-style regex, BOS by TemplateProcessing, ignore_merges.
        "llama4": dict(
            pre=split_sequence([O200K], byte_level()), norm=None, dec=bl_decoder,
            special=["<|begin_of_text|>", "<|end_of_text|>", "<|eot|>", "<|header_start|>"],
            added=[],
            post=lambda ids: template(bos="<|begin_of_text|>", tokens=[
                ("<|begin_of_text|>", ids["<|begin_of_text|>"])]),
            bpe={"ignore_merges": True}),
        # OLMoE (GPT-NeoX style): NFC, ByteLevel with GPT-2's built-in regex, EOS appended.
        "olmoe": dict(
            pre=byte_level(use_regex=True, trim_offsets=True), norm=normalizers.NFC(),
            dec=bl_decoder, special=["<|endoftext|>", "<|padding|>"], added=[],
            post=lambda ids: template(eos="<|endoftext|>", tokens=[
                ("<|endoftext|>", ids["<|endoftext|>"])]),
            bpe={}),
        # Granite(-MoE) (StarCoder style): single digits, then ByteLevel with GPT-2's regex.
        "granitemoe": dict(
            pre=pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                         byte_level(use_regex=True, trim_offsets=True)]),
            norm=None, dec=bl_decoder,
            special=["<|end_of_text|>", "<fim_prefix>", "<|start_of_role|>", "<|end_of_role|>"],
            added=[],
            post=lambda ids: processors.ByteLevel(trim_offsets=False),
            bpe={}),
        # Mixtral (the checkpoint's tokenizer.json): SentencePiece conventions as normalizers
        # (Prepend ▁, spaces to ▁), no pre-tokenizer, byte fallback, <unk> fused, BOS template.
        "mixtral": dict(
            pre=None,
            norm=normalizers.Sequence([normalizers.Prepend("\u2581"),
                                       normalizers.Replace(" ", "\u2581")]),
            dec=sp_decoder, special=["<unk>", "<s>", "</s>"], added=["[INST]"],
            post=lambda ids: template(bos="<s>", tokens=[("<s>", ids["<s>"])]),
            bpe={"byte_fallback": True, "fuse_unk": True, "unk_token": "<unk>"}, sentencepiece=True),
        # Mixtral as transformers converts it today (legacy=False): a Metaspace pre-tokenizer
        # that prepends ▁ to the first piece only, and the Metaspace decoder.
        "mixtral_metaspace": dict(
            pre=pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False),
            norm=None,
            dec=decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                      split=False),
                                   decoders.ByteFallback(), decoders.Fuse()]),
            special=["<unk>", "<s>", "</s>"], added=[],
            post=lambda ids: template(bos="<s>", tokens=[("<s>", ids["<s>"])]),
            bpe={"byte_fallback": True, "fuse_unk": True, "unk_token": "<unk>"}, sentencepiece=True),
        # Not a family: the split behaviors and added-token options the families do not use
        # (MergedWithPrevious/Next, Contiguous, string patterns, lstrip/rstrip, normalized added
        # tokens, NFKC, a regex Replace), so none of them goes untested.
        "behaviors_a": dict(
            pre=pre_tokenizers.Sequence([
                pre_tokenizers.Split(" ", behavior="merged_with_previous"),
                pre_tokenizers.Split(Regex(r"[,.;:]"), behavior="merged_with_next"),
                pre_tokenizers.Digits(individual_digits=False),
                byte_level()]),
            norm=normalizers.Sequence([normalizers.NFKC(),
                                       normalizers.Replace(Regex(r"\t+"), " ")]),
            dec=bl_decoder,
            special=[AddedToken("<mask>", special=True, normalized=False, lstrip=True,
                                rstrip=True), "<|endoftext|>"],
            added=[AddedToken("ﬁre", special=False, normalized=True),
                   AddedToken("Hello", special=True, normalized=True)],
            post=lambda ids: processors.Sequence([
                processors.ByteLevel(trim_offsets=False),
                template(bos="<|endoftext|>", eos="<mask>", tokens=[
                    ("<|endoftext|>", ids["<|endoftext|>"]), ("<mask>", ids["<mask>"])])]),
            bpe={}),
        "behaviors_b": dict(
            pre=pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"\p{P}"), behavior="removed"),
                pre_tokenizers.Split(Regex(r"\s+"), behavior="contiguous", invert=True),
                pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                         split=True)]),
            norm=normalizers.NFKD(),
            dec=decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
            special=["<unk>"], added=[],
            post=lambda ids: None,
            bpe={"unk_token": "<unk>", "fuse_unk": False}, unk_trained=True),
    }


def training_text():
    with open(os.path.join(OUT, "training.txt"), encoding="utf-8") as f:
        return f.read().splitlines()


def corpus():
    """Entries as raw bytes: text, or bytes that are not UTF-8 (what Python's
    bytes.decode('utf-8', 'replace') gives is what `tokenizers` sees)."""
    with open(os.path.join(OUT, "corpus.json"), encoding="utf-8") as f:
        entries = json.load(f)
    out = []
    for e in entries:
        out.append(bytes.fromhex(e["hex"]) if "hex" in e else e["text"].encode("utf-8"))
    return out


def train(name, cfg, lines):
    sentencepiece = cfg.get("sentencepiece", False)
    bpe_opts = dict(cfg["bpe"])
    tok = Tokenizer(models.BPE(**bpe_opts))
    if cfg["norm"] is not None:
        tok.normalizer = cfg["norm"]
    if cfg["pre"] is not None:
        tok.pre_tokenizer = cfg["pre"]
    tok.decoder = cfg["dec"]
    if cfg.get("unk_trained"):
        trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["<unk>"],
                                      limit_alphabet=50, show_progress=False)
    elif sentencepiece:
        # SentencePiece vocabularies: <unk> <s> </s> first, then the 256 byte tokens <0x00>..,
        # then the learned pieces; a small alphabet so rarer characters take the byte fallback.
        trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[], limit_alphabet=60,
                                      show_progress=False)
    else:
        trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
    tok.train_from_iterator(lines, trainer)
    if sentencepiece:
        data = json.loads(tok.to_str())
        learned = data["model"]["vocab"]
        vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
        for b in range(256):
            vocab["<0x%02X>" % b] = len(vocab)
        for piece, _ in sorted(learned.items(), key=lambda kv: kv[1]):
            if piece not in vocab:
                vocab[piece] = len(vocab)
        data["model"]["vocab"] = vocab
        tok = Tokenizer.from_str(json.dumps(data))
    def added(t, special):
        return t if isinstance(t, AddedToken) else AddedToken(t, special=special, normalized=False)
    tok.add_special_tokens([added(t, True) for t in cfg["special"]])
    tok.add_tokens([added(t, False) for t in cfg["added"]])
    ids = {(t.content if isinstance(t, AddedToken) else t):
           tok.token_to_id(t.content if isinstance(t, AddedToken) else t) for t in cfg["special"]}
    post = cfg["post"](ids)
    if post is not None:
        tok.post_processor = post
    return tok


def bytes256():
    """The bundled models' tokenizer (framework/text/byte_level_tokenizer.cc): ids 0..255 are
    the bytes, byte-level BPE without merges."""
    vocab = {c: b for b, c in byte_level_alphabet().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = byte_level()
    tok.decoder = decoders.ByteLevel()
    return tok


def byte_level_alphabet():
    """GPT-2's bytes_to_unicode: byte -> character."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def stream(tok, ids, skip):
    """DecodeStream.step per id: the text it returns, None, or {"error": ...} where the step
    fails because the text decoded so far no longer starts with what was emitted (a Strip or
    Metaspace decoder at the first token, a byte-fallback run that grew); the stream goes on."""
    ds = DecodeStream(skip_special_tokens=skip)
    out = []
    for i in ids:
        try:
            out.append(ds.step(tok, i))
        except Exception as e:  # the Rust InvalidPrefix error
            assert "Invalid prefix" in str(e), e
            out.append({"error": "invalid_prefix"})
    return out


def expected(tok, texts):
    cases = []
    for raw in texts:
        text = raw.decode("utf-8", "replace")
        ids = tok.encode(text).ids
        plain = tok.encode(text, add_special_tokens=False).ids
        cases.append({
            "input_hex": raw.hex(),
            "ids": ids,
            "ids_no_special": plain,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
            "stream": stream(tok, ids, False),
            "stream_skip_special": stream(tok, ids, True),
        })
    rng = random.Random(16)
    size = tok.get_vocab_size(with_added_tokens=True)
    decode_cases = []
    for n in (1, 2, 3, 5, 8, 13, 21, 34):
        for _ in range(3):
            ids = [rng.randrange(size) for _ in range(n)]
            decode_cases.append({
                "ids": ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
                "stream": stream(tok, ids, False),
            })
    return {"cases": cases, "decode_cases": decode_cases}


def main():
    import tokenizers
    lines = training_text()
    texts = corpus()
    only = set(sys.argv[1:])
    for name, cfg in list(families().items()) + [("bytes256", None)]:
        if only and name not in only:
            continue
        tok = bytes256() if name == "bytes256" else train(name, cfg, lines)
        folder = os.path.join(OUT, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"), pretty=False)
        data = expected(tok, texts)
        data["tokenizers_version"] = tokenizers.__version__
        with open(os.path.join(folder, "expected.json"), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(f"{name}: vocab {tok.get_vocab_size(with_added_tokens=True)}, "
              f"{len(data['cases'])} cases, {len(data['decode_cases'])} decode cases")


if __name__ == "__main__":
    main()
