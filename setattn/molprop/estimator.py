"""scikit-learn's estimator conventions for ``MoleculePredictor``.

``EstimatorConventions`` gives the predictor what scikit-learn's tools expect of an
estimator, so that ``clone``, ``Pipeline``, ``cross_val_score`` and ``GridSearchCV`` take
it as they take their own:

* ``get_params`` / ``set_params`` over every keyword ``__init__`` accepts: ``task``,
  ``descriptors``, ``output_dir``, ``verbose`` and each ``setattn train`` option (None,
  the command line's default, for an option not given);
* fitted attributes with a trailing underscore (``ensemble_``, ``metrics_``, ``meta_``,
  ``run_dir_``), readable under their plain names too;
* ``score`` (R2 for regression, ROC-AUC for classification: ``predict`` gives
  probabilities), ``_estimator_type`` and ``__sklearn_tags__`` following ``task``;
* inputs (``as_smiles``): SMILES strings, RDKit ``Mol`` objects, pandas Series or
  one-column DataFrames, NumPy arrays of strings or of ``Mol`` objects.

scikit-learn is imported only inside the methods that need it: importing it costs about
a second, which ``setattn predict`` would otherwise pay for nothing (see
``setattn.molprop.metrics``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from rdkit import Chem

from setattn.molprop.ensemble import Ensemble
from setattn.molprop.settings import option_names

__all__ = ["OWN_PARAMS", "EstimatorConventions", "as_smiles"]

OWN_PARAMS = ("task", "descriptors", "output_dir", "verbose")
"""The predictor's keywords that are not ``setattn train`` options passed through."""

NOT_OPTIONS = ("data", "task", "descriptors")
"""Options that ``fit`` sets, or that are keywords of their own."""


def _one_smiles(item: Any, name: str, i: int) -> str:
    """A SMILES string, or a ``Mol`` written as SMILES in its own atom order (so that
    it is featurised with the same atoms in the same order)."""
    if isinstance(item, str):
        return item
    if isinstance(item, Chem.Mol):
        return Chem.MolToSmiles(item, canonical=False)
    raise TypeError(f"argument {name}: item {i} is {type(item).__name__} {item!r}, not a "
                    f"SMILES string or an RDKit Mol")


def as_smiles(items: Any, name: str) -> list[str]:
    """Molecules as a list of SMILES strings.

    Args:
        items: one SMILES string or ``Mol``; or a sequence of them: a list, a pandas
            Series or one-column DataFrame, a NumPy array of shape (M,) or (M, 1).
        name: the argument, for messages.

    Raises:
        TypeError: naming ``name`` and the first item that is neither a string nor a
            ``Mol``, or an input that is not a sequence of molecules.
    """
    if isinstance(items, str | Chem.Mol):
        return [_one_smiles(items, name, 0)]
    if hasattr(items, "to_numpy"):  # pandas: a Series, or a DataFrame of one column
        items = items.to_numpy()
    if isinstance(items, np.ndarray):
        if items.ndim == 2 and items.shape[1] == 1:
            items = items[:, 0]
        if items.ndim != 1:
            raise TypeError(f"argument {name}: expected molecules of shape (M,) or (M, 1), "
                            f"got an array of shape {items.shape}")
    if not isinstance(items, Iterable):
        raise TypeError(f"argument {name}: a SMILES string, an RDKit Mol or a sequence of "
                        f"them, got {type(items).__name__}")
    return [_one_smiles(item, name, i) for i, item in enumerate(items)]


def _scored(y: np.ndarray, p: np.ndarray, score_task) -> float:
    """The mean over target columns of ``score_task(y_t, p_t)``, each on the rows where
    both the label and the prediction are numbers (NaN is a missing label or a molecule
    that did not parse)."""
    values = []
    for t in range(y.shape[1]):
        keep = np.isfinite(y[:, t]) & np.isfinite(p[:, t])
        values.append(score_task(y[keep, t], p[keep, t]))
    return float(np.mean(values))


class EstimatorConventions:
    """scikit-learn's estimator conventions (see the module docstring).

    The class using it stores ``task``, ``descriptors``, ``output_dir`` and ``verbose``
    as given, the other options in ``_options``, and defines ``predict`` and
    ``_check_options(params)``.
    """

    task: str
    descriptors: str
    output_dir: str | Path | None
    verbose: bool
    _options: dict[str, Any]

    @staticmethod
    def option_keywords() -> list[str]:
        """The ``setattn train`` options ``__init__`` accepts as keywords."""
        return [n for n in option_names() if n not in NOT_OPTIONS]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Every keyword of ``__init__`` and its value (None: the option's default)."""
        params = {name: getattr(self, name) for name in OWN_PARAMS}
        params.update({name: self._options.get(name) for name in self.option_keywords()})
        return params

    def set_params(self, **params: Any):
        """Set keywords as ``__init__`` takes them; checked as there. Returns ``self``.

        Raises:
            ValueError: for a keyword that is not one (scikit-learn's convention), or a
                value out of range (naming the keyword).
        """
        allowed = set(OWN_PARAMS) | set(self.option_keywords())
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise ValueError(f"{type(self).__name__}.set_params: unknown keyword(s) "
                             f"{unknown}; keywords: {sorted(allowed)}")
        merged = {**self.get_params(), **params}
        self._check_options(merged)
        for name, value in params.items():
            if name in OWN_PARAMS:
                setattr(self, name, value)
            else:
                self._options[name] = value
        return self

    def _check_options(self, params: dict[str, Any]) -> None:
        raise NotImplementedError

    @property
    def _estimator_type(self) -> str:
        """"classifier" or "regressor", following ``task``."""
        return "classifier" if self.task == "classification" else "regressor"

    def __sklearn_tags__(self):
        """scikit-learn's tags: a regressor or a classifier of molecules (strings or
        ``Mol`` objects, not numeric arrays), which needs ``y`` to fit."""
        from sklearn.utils import ClassifierTags, InputTags, RegressorTags, Tags, TargetTags

        classifier = self._estimator_type == "classifier"
        return Tags(estimator_type=self._estimator_type,
                    target_tags=TargetTags(required=True, single_output=False,
                                           multi_output=True),
                    classifier_tags=ClassifierTags() if classifier else None,
                    regressor_tags=None if classifier else RegressorTags(),
                    input_tags=InputTags(one_d_array=True, two_d_array=False, string=True))

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """R2 of the predictions for regression, ROC-AUC of the predicted probabilities
        for classification; the mean over target columns, NaN labels and molecules that
        do not parse left out.

        Args:
            X: M molecules (see ``as_smiles``).
            y: (M,) or (M, T) targets.
            sample_weight: not supported (None).
        """
        if sample_weight is not None:
            raise TypeError("score: sample_weight is not supported")
        p = np.asarray(self.predict(X), dtype=np.float64)  # (M, T)
        y = np.asarray(y, dtype=np.float64).reshape(p.shape[0], -1)  # (M, T)
        if self._estimator_type == "classifier":
            from setattn.molprop.metrics import roc_auc

            return _scored(y, p, roc_auc)
        from sklearn.metrics import r2_score

        return _scored(y, p, lambda yt, pt: float(r2_score(yt, pt)))

    # fitted attributes, also under the names they had before scikit-learn's convention
    @property
    def ensemble(self) -> Ensemble | None:
        """``ensemble_``: the trained (or loaded) ensemble, in eval mode (None before)."""
        return getattr(self, "ensemble_", None)

    @property
    def metrics(self) -> dict | None:
        """``metrics_``: ``metrics.json`` of the run (None if there is none)."""
        return getattr(self, "metrics_", None)

    @property
    def meta(self) -> dict:
        """``meta_``: the run's checkpoint metadata ({} before fitting)."""
        return getattr(self, "meta_", {})

    @property
    def run_dir(self) -> Path | None:
        """``run_dir_``: the run directory the models come from."""
        return getattr(self, "run_dir_", None)

    @property
    def errors(self) -> list[tuple[int, str, str]]:
        """(index, SMILES, reason) of each SMILES the last prediction could not parse."""
        return getattr(self, "_errors", [])

    @property
    def notes(self) -> list[tuple[int, str, str]]:
        """(index, SMILES, note) of each SMILES predicted with a remark."""
        return getattr(self, "_notes", [])
