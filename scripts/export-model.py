"""Exports an ESM-2 protein language model (fair-esm) to yardmaster's TorchScript contract:
input int64 [batch, tokens] (ESM-2's token ids, padded with <pad>), output float32
[batch, dim]: the chosen layer's representations, mean-pooled over the residues (not <cls>,
<eos> or padding) and L2-normalised. Also writes ESM-2's vocabulary file for
`inference.tokenizer`, and prints the settings to use.

The export is traced with one batch shape and then checked against the model run eagerly on
another (other lengths, other padding); nothing is written if they disagree.

    python3 -m venv /tmp/export && /tmp/export/bin/pip install torch==2.13.0 fair-esm==2.0.0
    # weights you already have (fair-esm's checkpoint file, e.g. esm2_t33_650M_UR50D.pt):
    /tmp/export/bin/python scripts/export-model.py --weights ~/esm2_t33_650M_UR50D.pt --out models/esm2.pt
    # or random weights of a small ESM-2, to try the path end to end with no download:
    /tmp/export/bin/python scripts/export-model.py --random-layers 2 --out models/esm2-random.pt

Another model (ProtT5, ...) follows the same shape: a module whose forward takes the token
ids and returns one normalised vector per row, traced or scripted, with its tokeniser given
as a vocabulary file or a Hugging Face tokenizer.json.
"""

import argparse
import pathlib

import esm
import torch


class Pooled(torch.nn.Module):
    """ESM-2 to the contract: one layer's token representations, mean-pooled, normalised."""

    def __init__(self, model, layer, alphabet):
        super().__init__()
        self.model = model
        self.layer = layer
        self.specials = [alphabet.cls_idx, alphabet.eos_idx, alphabet.padding_idx]

    def forward(self, tokens):
        out = self.model(tokens, repr_layers=[self.layer])["representations"][self.layer]
        keep = torch.ones_like(tokens, dtype=torch.bool)
        for special in self.specials:
            keep = keep & (tokens != special)
        keep = keep.unsqueeze(-1).to(out.dtype)
        pooled = (out * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=1)


def batch(alphabet, sequences):
    _, _, tokens = alphabet.get_batch_converter()([(str(n), s) for n, s in enumerate(sequences)])
    return tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--weights", type=pathlib.Path, help="a fair-esm ESM-2 checkpoint file")
    source.add_argument("--random-layers", type=int, help="a small ESM-2 with random weights")
    parser.add_argument("--layer", type=int, help="the layer to pool (default: the last)")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="the TorchScript file to write")
    args = parser.parse_args()

    if args.weights:
        model, alphabet = esm.pretrained.load_model_and_alphabet_local(str(args.weights))
    else:
        torch.manual_seed(0)
        alphabet = esm.data.Alphabet.from_architecture("ESM-1b")
        model = esm.model.esm2.ESM2(num_layers=args.random_layers, embed_dim=64, attention_heads=4, alphabet=alphabet)
    model.eval()
    layer = args.layer if args.layer is not None else model.num_layers
    pooled = Pooled(model, layer, alphabet).eval()

    with torch.no_grad():
        example = batch(alphabet, ["MKTAYIAKQR", "MKV"])
        traced = torch.jit.trace(pooled, example, check_trace=False)
        other = batch(alphabet, ["A", "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "ACDEFGHIKLMNPQRSTVWY" * 2])
        differs = (traced(other) - pooled(other)).abs().max().item()
    if differs > 1e-4:
        raise SystemExit(f"export-model: the traced model differs from the eager one by {differs}; nothing written")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    traced.save(str(args.out))
    vocab = args.out.with_name("esm2-vocab.txt")
    vocab.write_text("".join(token + "\n" for token in alphabet.all_toks))
    dim = traced(other).shape[1]
    print(f"wrote {args.out} (layer {layer}, vectors of {dim}; checked against the eager model: {differs:.1e}) and {vocab}")
    print(
        "\n[inference]\n"
        f'model = "{args.out}"\n'
        f"max_tokens = 1024\n\n"
        "[inference.tokenizer]\n"
        'kind = "vocabulary"\n'
        f'file = "{vocab}"\n'
        'pad = "<pad>"\nstart = "<cls>"\nend = "<eos>"\nunknown = "<unk>"'
    )


if __name__ == "__main__":
    main()
