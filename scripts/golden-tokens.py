"""Makes the tokeniser golden files in tests/data/tokenizers/, once, from the models' own
Python tokenisers; the Rust test `tokenizers_match_the_models_own` reads them.

- esm2-vocab.txt: ESM-2's alphabet (fair-esm's `Alphabet.from_architecture("ESM-1b")`,
  which every ESM-2 model uses), one token a line: the `vocabulary` tokeniser's file.
- protein-tokenizer.json: a ProtT5-style Hugging Face tokeniser (rare residues U, Z, O, B read
  as X, one token a residue, `</s>` after each sequence), built here with the `tokenizers`
  library: the `huggingface` tokeniser's file.
- golden.json: sequences, and for each the ids fair-esm's batch converter and the
  `tokenizers` library give them (without padding). fair-esm refuses a sequence holding
  characters outside its alphabet (a KeyError): its ids are null there.

    python3 -m venv /tmp/golden && /tmp/golden/bin/pip install torch==2.13.0 fair-esm==2.0.0 tokenizers==0.22.2
    /tmp/golden/bin/python scripts/golden-tokens.py
"""

import json
import pathlib

import esm
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers"

SEQUENCES = [
    "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEGLYTHMKALRPDEDRLSPLHSVYVDQWDWERVMGDGERQFSTLKSTVEAIWAGIKATEAAVSEEFGLAPFLPDQIHFVHSQELLSRYPDLDAKGRERAIAKDLGAVFLVGIGGKLSDGHRHDVRAPDYDDWUAIGKALESPLLVRAYELGAQRPYY",
    "A",
    "MKV",
    # Rare residues, gaps and the unknown X.
    "XBUZO.-MK",
    # Lower case and letters outside the alphabet: runs of them are one unknown token in ESM.
    "mkvJJLa",
    # Whitespace only separates.
    "M K  V\tL",
    # A special token written in the sequence.
    "MK<mask>V",
    "ACDEFGHIKLMNPQRSTVWY" * 3,
]


def esm2():
    alphabet = esm.data.Alphabet.from_architecture("ESM-1b")
    convert = alphabet.get_batch_converter()
    ids = []
    for sequence in SEQUENCES:
        try:
            _, _, tokens = convert([("x", sequence)])
        except KeyError:
            ids.append(None)
            continue
        ids.append([int(token) for token in tokens[0].tolist()])
    (OUT / "esm2-vocab.txt").write_text("".join(token + "\n" for token in alphabet.all_toks))
    names = {"pad": "<pad>", "start": "<cls>", "end": "<eos>", "unknown": "<unk>"}
    assert alphabet.padding_idx == alphabet.all_toks.index(names["pad"])
    return ids, names


def protein_tokenizer():
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for residue in "ACDEFGHIKLMNPQRSTVWYX":
        vocab[residue] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Replace(Regex("[UZOB]"), "X")])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex("."), behavior="isolated")]
    )
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer.enable_padding(pad_id=0, pad_token="<pad>")
    tokenizer.save(str(OUT / "protein-tokenizer.json"))
    return [tokenizer.encode(sequence).ids for sequence in SEQUENCES]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    esm_ids, esm_names = esm2()
    golden = {
        "made_by": "scripts/golden-tokens.py (fair-esm 2.0.0, tokenizers 0.22.2)",
        "sequences": SEQUENCES,
        "esm2": {"file": "esm2-vocab.txt", **esm_names, "ids": esm_ids},
        "huggingface": {"file": "protein-tokenizer.json", "ids": protein_tokenizer()},
    }
    (OUT / "golden.json").write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
