"""A pretraining corpus of whole MOSES molecules and small pieces cut from others.

MOSES's molecules are lead-like (molecular weight 250-350), so an encoder pretrained on
them alone has seen few of the small molecules of FreeSolv or ESOL. This script adds
pieces of other MOSES molecules: each is cut at its BRICS bonds (Degen et al.,
ChemMedChem 2008; RDKit's ``BRICS.BRICSDecompose``), each cut end is capped with a
hydrogen, and the distinct pieces (canonical SMILES) join the corpus. Every molecule
comes from MOSES's training set; no labelled set is read. Run from the repository root:

    .venv/bin/python datasets/pretrain_corpus.py \\
        --moses ../shared/data/molecules/moses/train.csv.gz \\
        --whole 200000 --cut 150000 --seed 0 --output runs/corpus/moses_pieces.csv.gz

The output is a gzipped CSV with one column, ``smiles``, in a seeded order, for
``setattn pretrain --corpus ... --smiles-column smiles --molecules 0``. The same
arguments write the same file.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import random
from pathlib import Path

from rdkit import Chem, RDLogger
from rdkit.Chem import BRICS
from tqdm import tqdm

from setattn.datasets.molecules import read_molecule_table

DUMMY = Chem.MolFromSmarts("[#0]")
HYDROGEN = Chem.MolFromSmiles("[H]", sanitize=False)


def capped(piece: str) -> str | None:
    """A BRICS piece (cut ends written ``[n*]``) with each cut end a hydrogen, as
    canonical SMILES; None if RDKit cannot make a molecule of it."""
    mol = Chem.MolFromSmiles(piece)
    if mol is None:
        return None
    mol = Chem.ReplaceSubstructs(mol, DUMMY, HYDROGEN, replaceAll=True)[0]
    try:
        mol = Chem.RemoveHs(mol)
    except Exception:  # RDKit raises its own sanitisation errors
        return None
    return Chem.MolToSmiles(mol) if mol.GetNumAtoms() else None


def pieces(smiles: str) -> set[str]:
    """The capped BRICS pieces of one molecule (empty if it does not parse or has no
    BRICS bond)."""
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return set()
    found = {capped(p) for p in BRICS.BRICSDecompose(mol)}
    found.discard(None)
    found.discard(Chem.MolToSmiles(mol))  # an uncut molecule is not a piece
    return found


def corpus(smiles: list[str], whole: int, cut: int, seed: int,
           progress: bool = True) -> tuple[list[str], int]:
    """``whole`` molecules drawn at random (``seed``), and the distinct pieces of ``cut``
    further drawn molecules that are not already in the corpus, shuffled together with
    the same seed. Returns the corpus and how many of it are pieces.

    Raises:
        ValueError: if ``smiles`` has fewer than ``whole + cut`` molecules.
    """
    if whole + cut > len(smiles):
        raise ValueError(f"--whole {whole} and --cut {cut} are more than the "
                         f"{len(smiles)} molecules")
    rng = random.Random(seed)
    order = rng.sample(range(len(smiles)), len(smiles))
    taken = [smiles[i] for i in order[:whole]]
    seen = set(taken)
    cut_pieces: list[str] = []
    for i in tqdm(order[whole:whole + cut], desc="cut", unit="mol", disable=not progress):
        for piece in sorted(pieces(smiles[i])):
            if piece not in seen:
                seen.add(piece)
                cut_pieces.append(piece)
    out = taken + cut_pieces
    rng.shuffle(out)
    return out, len(cut_pieces)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moses", type=Path, required=True, help="MOSES's train.csv.gz")
    p.add_argument("--whole", type=int, default=200_000, help="whole molecules drawn")
    p.add_argument("--cut", type=int, default=150_000,
                   help="further molecules cut into pieces (their distinct pieces join)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, required=True, help="the corpus (.csv.gz)")
    args = p.parse_args(argv)
    if args.output.suffix != ".gz":
        p.error(f"argument --output: {args.output} must end in .gz (a gzipped CSV)")
    RDLogger.DisableLog("rdApp.*")
    smiles = read_molecule_table(args.moses, "SMILES", []).smiles
    rows, n_pieces = corpus(smiles, args.whole, args.cut, args.seed)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(args.output.name + ".part")
    # no time stamp or file name in the gzip header: the same rows, the same bytes
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb",
                                               mtime=0) as packed, \
            io.TextIOWrapper(packed, encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["smiles"])
        writer.writerows([s] for s in rows)
    tmp.replace(args.output)
    print(f"wrote {len(rows):,} SMILES ({args.whole:,} whole molecules, {n_pieces:,} distinct "
          f"pieces of {args.cut:,} others) to {args.output}")


if __name__ == "__main__":
    main()
