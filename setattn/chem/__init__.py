"""Chemistry for the molecule model (needs RDKit): RDKit 2D descriptors in named sets.

- ``descriptors``: the sets (``rdkit``, ``lean``, ``fast``) and ``mol_descriptors``.
- ``context``: one molecule's intermediate results (EState indices, Crippen, Labute and
  Gasteiger contributions, distance matrices), computed once and shared.
- ``values``: the descriptors computed from them, to RDKit's bits.
- ``shares``: each descriptor's value split over the atoms.
- ``fragments``: the SMARTS patterns of RDKit's ``fr_*`` counts, as data.
"""
