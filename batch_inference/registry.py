"""The model registry: ``STRATA_HOME/models/<name>/<version>/`` holds ``model.onnx`` and ``model.json``.

A registered version is immutable: a re-train makes a new version (``v1``, ``v2``, …), created
whole in a scratch folder and renamed into place, so a crash never leaves half a version and
two trainings never take the same number. ``model.json`` is the model's card: its ordered
input features with their dtypes, the feature service it was trained from, the training
window, its metrics, the sha256 of ``model.onnx`` and the library versions that made it.
Loading checks both: ``model.onnx`` against its sha256, and the card against ``card_sha256``,
the hash of its own canonical JSON — reordered features or a changed threshold change the
scores, so a card edited after registration is refused as an edited model file is. (The hashes
catch edits, not a forger who rewrites them too: that needs the registry's files protected.)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from contracts.errors import InputError
from warehouse.errors import NotYet
from warehouse.settings import Settings

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_VERSION = re.compile(r"^v(\d+)$")


class ModelError(InputError):
    """A model cannot be registered, found or used; the message says which and why."""


class BadCard(ModelError):
    """A registered version's ``model.json`` does not parse or changed after registration: it is unusable."""


class NotEnoughLabels(ModelError, NotYet):
    """The training window lacks positive or negative examples: no model can be learnt from it yet."""


@dataclass(frozen=True)
class Feature:
    """One input column of a model, in the order the model takes them."""

    name: str
    dtype: str  # numpy dtype name of the model's input, e.g. float32


@dataclass(frozen=True)
class ModelCard:
    """What ``model.json`` says about one registered version."""

    name: str
    version: str
    features: tuple[Feature, ...]
    feature_service: str
    entity: str  # the join key the model scores, e.g. user_pseudonym
    training_window: tuple[str, str]  # first and last day of the training set
    metrics: dict[str, float]
    sha256: str
    libraries: dict[str, str]
    threshold: float
    created_at: str
    #: The DWS table the features come from (the offline store's source of the feature service).
    source_table: str = "dws.user_features"
    extra: dict[str, object] = field(default_factory=dict)
    #: sha256 of the rest of the card (:meth:`digest`), set at registration.
    card_sha256: str = ""

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def digest(self) -> str:
        """sha256 of the card's canonical JSON (sorted keys, no spaces), ``card_sha256`` left out."""
        doc = asdict(self)
        del doc["card_sha256"]
        return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    @staticmethod
    def from_json(text: str) -> ModelCard:
        doc = json.loads(text)
        doc["features"] = tuple(Feature(**f) for f in doc["features"])
        doc["training_window"] = tuple(doc["training_window"])
        return ModelCard(**doc)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True)
class ModelVersion:
    """A registered version: its card and where its ONNX file is."""

    card: ModelCard
    path: Path

    @property
    def onnx_path(self) -> Path:
        return self.path / "model.onnx"

    def onnx_bytes(self) -> bytes:
        """The model file, after checking it is exactly the one registered."""
        data = self.onnx_path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != self.card.sha256:
            raise ModelError(
                f"{self.onnx_path}: sha256 {digest[:12]}… does not match the registered "
                f"{self.card.sha256[:12]}… of {self.card.ref}: the file changed after registration; "
                "re-train to make a new version"
            )
        return data


def _root(settings: Settings, name: str) -> Path:
    if not _NAME.match(name):
        raise ModelError(f"{name!r} is not a model name (lower-case letters, digits and '_', starting with a letter)")
    return settings.registry_dir / name


def _versions(folder: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _VERSION.match(p.name))) if folder.is_dir() else []


def register(settings: Settings, card: ModelCard, onnx: bytes) -> ModelVersion:
    """Store a new version of ``card.name``; the card's version and sha256 are set here."""
    folder = _root(settings, card.name)
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(onnx).hexdigest()
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder))
    try:
        for _ in range(100):  # another training may take a number first: take the next one
            version = f"v{(_versions(folder) or [0])[-1] + 1}"
            unsealed = ModelCard(
                **{
                    **asdict(card),
                    "version": version,
                    "sha256": digest,
                    "card_sha256": "",
                    "features": card.features,
                    "training_window": card.training_window,
                }
            )
            final = replace(unsealed, card_sha256=unsealed.digest())
            (staging / "model.onnx").write_bytes(onnx)
            (staging / "model.json").write_text(final.to_json())
            try:
                os.rename(staging, folder / version)  # atomic; fails if another training took the number
            except OSError:
                continue
            for path in (folder / version).iterdir():
                path.chmod(0o444)  # immutable
            return ModelVersion(final, folder / version)
        raise ModelError(f"could not register a new version of {card.name} in {folder}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def get(settings: Settings, name: str, version: str | None = None) -> ModelVersion:
    """A registered version (the latest when ``version`` is None)."""
    folder = _root(settings, name)
    versions = _versions(folder)
    if not versions:
        raise ModelError(f"no model {name!r} is registered", step="train")
    chosen = version or f"v{versions[-1]}"
    path = folder / chosen
    if not (path / "model.json").is_file():
        raise ModelError(f"{name} has no version {chosen!r} (registered: {', '.join(f'v{v}' for v in versions)})")
    return ModelVersion(_verified_card(path, f"{name}@{chosen}"), path)


def _verified_card(path: Path, ref: str) -> ModelCard:
    """The card in ``path``, when it parses and is the one registered; else :class:`BadCard`."""
    again = "re-train to register a new version"
    try:
        card = ModelCard.from_json((path / "model.json").read_text())
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # bad JSON, or not a card's fields
        raise BadCard(
            f"{ref}: its model.json is not a model card ({type(exc).__name__}: {exc}); {again}", step="train"
        ) from None
    if not card.card_sha256:
        raise BadCard(
            f"{ref}: its model.json has no card_sha256 (registered before cards were hashed), so an edit "
            f"to its features or threshold could not be told; {again}",
            step="train",
        )
    if card.digest() != card.card_sha256 or card.ref != ref:
        raise BadCard(
            f"{ref}: its model.json changed after registration (it no longer matches its card_sha256 "
            f"{card.card_sha256[:12]}…); {again}",
            step="train",
        )
    return card


@dataclass(frozen=True)
class Listed:
    """One registered version as :func:`list_models` finds it: its card, or why it is unusable."""

    name: str
    version: str
    card: ModelCard | None
    problem: str | None = None


def list_models(settings: Settings) -> list[Listed]:
    """Every registered version of every model, by name then version; a bad card is listed with its reason."""
    root = settings.registry_dir
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(root.iterdir()):
        if _NAME.match(folder.name):
            for v in _versions(folder):
                try:
                    out.append(Listed(folder.name, f"v{v}", get(settings, folder.name, f"v{v}").card))
                except ModelError as exc:
                    out.append(Listed(folder.name, f"v{v}", None, str(exc)))
    return out


def new_card(
    name: str,
    features: list[Feature],
    *,
    feature_service: str,
    entity: str,
    window: tuple[dt.date, dt.date],
    metrics: dict[str, float],
    threshold: float,
    source_table: str,
) -> ModelCard:
    """A card for a model about to be registered (version and sha256 are set by :func:`register`)."""
    import onnx
    import onnxruntime
    import skl2onnx
    import sklearn

    return ModelCard(
        name=name,
        version="",
        features=tuple(features),
        feature_service=feature_service,
        entity=entity,
        training_window=(window[0].isoformat(), window[1].isoformat()),
        metrics=metrics,
        sha256="",
        libraries={
            "scikit-learn": sklearn.__version__,
            "skl2onnx": skl2onnx.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
        threshold=threshold,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        source_table=source_table,
    )
