"""``MoleculePredictor`` as a scikit-learn estimator: ``clone``, ``get_params`` /
``set_params``, ``Pipeline``, ``cross_val_score``, ``GridSearchCV``; molecules given as
SMILES, RDKit ``Mol`` objects or NumPy arrays; and scikit-learn's own estimator checks,
each one that cannot apply listed with the reason."""

from __future__ import annotations

import gc
import inspect
import json
import pickle
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from molecule_runs import (
    freesolv_slice,
    keep_threads,  # noqa: F401 (the fixture pytestmark uses)
    read_csv,
    subprocess_env,
)
from rdkit import Chem
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.estimator_checks import estimator_checks_generator

from setattn.molprop import MoleculePredictor

FAST = {"epochs": 5, "ensemble_size": 1, "layers": 1, "heads": 2, "kernel_ridge": "off",
        "verbose": False}

APPLICABLE = {
    "check_estimator_cloneable", "check_estimator_repr", "check_estimator_tags_renamed",
    "check_estimators_partial_fit_n_features", "check_estimators_unfitted",
    "check_get_params_invariance", "check_mixin_order", "check_no_attributes_set_in_init",
    "check_non_transformer_estimators_n_iter", "check_parameters_default_constructible",
    "check_set_params", "check_valid_tag_types",
}
"""scikit-learn's checks that apply to an estimator of molecules, and pass."""

NUMERIC_X = "fits or predicts on numeric arrays as X; X here is molecules (SMILES or Mols)"
NOT_APPLICABLE = {
    **{name: NUMERIC_X for name in (
        "check_fit_score_takes_y", "check_estimators_overwrite_params",
        "check_dont_overwrite_parameters", "check_estimators_fit_returns_self",
        "check_readonly_memmap_input", "check_n_features_in_after_fitting",
        "check_positive_only_tag_during_fit", "check_estimators_dtypes",
        "check_complex_data", "check_dtype_object", "check_estimators_empty_data_messages",
        "check_pipeline_consistency", "check_estimators_nan_inf",
        "check_estimator_sparse_tag", "check_estimator_sparse_array",
        "check_estimator_sparse_matrix", "check_estimators_pickle",
        "check_f_contiguous_array_estimator", "check_regressors_train",
        "check_regressor_data_not_an_array", "check_regressor_multioutput",
        "check_regressors_no_decision_function", "check_supervised_y_no_nan",
        "check_regressors_int", "check_methods_sample_order_invariance",
        "check_methods_subset_invariance", "check_fit2d_1sample", "check_fit2d_1feature",
        "check_dict_unchanged", "check_fit_idempotent", "check_fit_check_is_fitted",
        "check_n_features_in", "check_fit1d", "check_fit2d_predict1d",
        "check_requires_y_none", "check_transformer_general",
        "check_transformer_data_not_an_array")},
    "check_array_api_input": "skipped by scikit-learn unless SCIPY_ARRAY_API is set; "
                             "X is not an array of numbers",
}
"""Each of scikit-learn's checks that cannot apply, and why."""

pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture(scope="module")
def freesolv(tmp_path_factory):
    rows = read_csv(freesolv_slice(tmp_path_factory.mktemp("data") / "freesolv.csv", 120))
    return [r["smiles"] for r in rows], np.array([float(r["expt"]) for r in rows])


class _NumericTags(MoleculePredictor):
    """The predictor claiming numeric 2-D input, so that scikit-learn runs its checks
    (it skips every check for an estimator of strings)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array, tags.input_tags.string = True, False
        return tags


def test_scikit_learns_checks_pass_or_are_listed():
    est = _NumericTags(epochs=1, hidden=8, layers=1, heads=2, ensemble_size=1, verbose=False)
    passed, failed = set(), set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for estimator, check in estimator_checks_generator(est, legacy=True):
            name = getattr(check, "func", check).__name__
            try:
                check(estimator)
                passed.add(name)
            except Exception:  # noqa: BLE001 - every failure is compared with the list
                failed.add(name)
    assert APPLICABLE <= passed
    assert failed <= set(NOT_APPLICABLE), failed - set(NOT_APPLICABLE)
    assert not passed & set(NOT_APPLICABLE)  # a listed check that passes: list it above


def test_params_clone_and_set_params():
    model = MoleculePredictor(epochs=5, hidden=32, target_columns="expt", verbose=False)
    params = model.get_params()
    assert params["epochs"] == 5 and params["hidden"] == 32 and params["lr"] is None
    assert params["task"] == "regression" and set(params) >= {"descriptors", "output_dir"}
    copy = clone(model)
    assert copy is not model and copy.get_params() == params
    assert copy.set_params(hidden=64) is copy and copy.get_params()["hidden"] == 64
    assert model.get_params()["hidden"] == 32
    with pytest.raises(ValueError, match=r"unknown keyword\(s\) \['hiden'\]"):
        copy.set_params(hiden=3)
    copy.set_params(epochs=0)  # kept as given, refused by check and fit
    with pytest.raises(ValueError, match="^epochs must be >= 1, got 0$"):
        copy.check()
    assert list(inspect.signature(MoleculePredictor.__init__).parameters)[1:] == \
        MoleculePredictor.param_names()  # explicit keywords, one per option
    assert is_regressor(model) and model._estimator_type == "regressor"
    assert is_classifier(MoleculePredictor("classification"))
    assert not hasattr(model, "ensemble_") and model.ensemble is None and model.metrics is None


def test_grid_search_on_120_molecules(freesolv, tmp_path, monkeypatch):
    smiles, y = freesolv
    # temporary runs in a folder of this test's own: other tests' runs come and go in the
    # shared temporary folder while this one runs
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = set(Path(tempfile.gettempdir()).glob("setattn-*"))
    search = GridSearchCV(MoleculePredictor(**FAST), {"hidden": [32, 64]}, cv=3)
    search.fit(smiles, y)
    assert search.best_params_["hidden"] in (32, 64)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    best = search.best_estimator_
    assert best.ensemble_ and best.run_dir_.is_dir() and best.get_params()["hidden"] in (32, 64)
    assert search.predict(smiles[:4]).shape == (4, 1)
    del search, best
    gc.collect()
    assert set(Path(tempfile.gettempdir()).glob("setattn-*")) == before  # no run left behind


def test_pipeline_and_cross_val_score_on_mols(freesolv):
    smiles, y = freesolv
    to_mols = FunctionTransformer(lambda items: [Chem.MolFromSmiles(s) for s in items])
    pipe = Pipeline([("mols", to_mols), ("model", MoleculePredictor(hidden=16, **FAST))])
    scores = cross_val_score(pipe, np.array(smiles, dtype=object), y,
                             cv=KFold(3, shuffle=True, random_state=0))
    assert scores.shape == (3,) and np.isfinite(scores).all()


def test_mols_arrays_and_smiles_give_the_same_predictions(freesolv):
    smiles, y = (part[:60] for part in freesolv)
    mols = [Chem.MolFromSmiles(s) for s in smiles]
    on_smiles = MoleculePredictor(hidden=16, **FAST).fit(smiles, y)
    on_mols = MoleculePredictor(hidden=16, **FAST).fit(mols, y)
    want = on_smiles.predict(smiles)
    np.testing.assert_allclose(on_mols.predict(mols), want, rtol=1e-5, atol=1e-5)
    column = np.array(smiles, dtype=object)[:, None]  # (M, 1), as a ColumnTransformer gives
    np.testing.assert_array_equal(on_smiles.predict(column), want)
    np.testing.assert_array_equal(on_smiles.predict(np.array(mols, dtype=object)),
                                  on_smiles.predict(mols))
    assert on_smiles.score(smiles, y) == pytest.approx(on_smiles.score(mols, y))
    with pytest.raises(ValueError, match=r"argument y: expected shape \(3,\) or \(3, T\)"):
        on_smiles.score(smiles[:3], y[:2])
    with pytest.raises(ValueError, match="argument y: 2 target column.s., the model predicts 1"):
        on_smiles.score(smiles[:3], np.ones((3, 2)))
    with pytest.raises(TypeError, match="argument smiles: item 1 is float 2.0, not a SMILES"):
        on_smiles.predict(["CCO", 2.0])


def test_pandas_series(freesolv):
    pd = pytest.importorskip("pandas")
    smiles, y = (part[:40] for part in freesolv)
    model = MoleculePredictor(hidden=16, **FAST).fit(pd.Series(smiles), pd.Series(y))
    np.testing.assert_array_equal(model.predict(pd.Series(smiles)), model.predict(smiles))


def test_a_pickled_predictor_saves_in_another_process(freesolv, tmp_path):
    """A predictor fitted in a temporary run directory carries the run in its pickle:
    another process predicts the same numbers and saves a run directory, after the
    original (and its temporary folder) is gone."""
    smiles, y = freesolv
    model = MoleculePredictor(epochs=1, hidden=8, heads=2, ensemble_size=1, verbose=False)
    model.fit(smiles[:40], y[:40])
    expected = model.predict(smiles[:3])
    blob = tmp_path / "model.pkl"
    blob.write_bytes(pickle.dumps(model))
    folder = model.run_dir
    del model
    gc.collect()
    assert not folder.exists()  # the temporary run went with its object
    # the test's own pickle, written above: trusted
    code = ("import json, pickle, sys; m = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "print(json.dumps(m.predict(sys.argv[3:]).tolist())); m.save(sys.argv[2])")
    out = subprocess.run([sys.executable, "-c", code, str(blob), str(tmp_path / "saved"),
                          *smiles[:3]], capture_output=True, text=True, check=True,
                         env=subprocess_env())
    assert np.allclose(json.loads(out.stdout.strip().splitlines()[-1]), expected, atol=1e-6)
    assert (tmp_path / "saved" / "config.json").is_file()
    assert (tmp_path / "saved" / "ensemble.pt").is_file()
