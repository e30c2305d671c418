"""Where zenops finds its Ansible collection, and where it keeps state.

The repository root is the collection ``zenops.inference``. Two ways to run:

* an editable install or a source checkout: the live tree is used. Ansible wants a *collections path*, a directory
  holding ``ansible_collections/zenops/inference``, so a symlink to the live tree is kept in a per-checkout cache dir.
* a wheel install: the collection is shipped inside the package as ``zenops/_collection/ansible_collections/...``.

``ZENOPS_COLLECTION_ROOT`` overrides both (a directory holding galaxy.yml of zenops.inference).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from zenops.errors import ZenopsError

COLLECTION_NAMESPACE = "zenops"
COLLECTION_NAME = "inference"
_PACKAGE_DIR = Path(__file__).resolve().parent
_SHIPPED = _PACKAGE_DIR / "_collection"


def _is_collection_root(path: Path) -> bool:
    return (path / "galaxy.yml").is_file() and (path / "playbooks").is_dir() and (path / "roles").is_dir()


def collection_root() -> Path:
    """The directory that is the zenops.inference collection (holds galaxy.yml, roles/, playbooks/)."""
    override = os.environ.get("ZENOPS_COLLECTION_ROOT")
    if override:
        root = Path(override).expanduser().resolve()
        if not _is_collection_root(root):
            raise ZenopsError(
                f"ZENOPS_COLLECTION_ROOT={override} is not the zenops.inference collection "
                "(no galaxy.yml, roles/ and playbooks/ there). Unset it or point it at a zenops checkout."
            )
        return root
    live = _PACKAGE_DIR.parents[1]  # <checkout>/src/zenops -> <checkout>
    if _is_collection_root(live):
        return live
    shipped = _SHIPPED / "ansible_collections" / COLLECTION_NAMESPACE / COLLECTION_NAME
    if _is_collection_root(shipped):
        return shipped
    raise ZenopsError(
        "cannot find the zenops.inference Ansible collection: this zenops install has neither a source tree nor a "
        "shipped collection. Reinstall with `pip install .` from a zenops checkout, or set ZENOPS_COLLECTION_ROOT."
    )


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zenops"


def default_state_dir() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "zenops"


def collections_path() -> Path:
    """A directory to put in ANSIBLE_COLLECTIONS_PATH so that ``zenops.inference.*`` resolves to collection_root()."""
    root = collection_root()
    if root == _SHIPPED / "ansible_collections" / COLLECTION_NAMESPACE / COLLECTION_NAME:
        return _SHIPPED
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    base = cache_home() / "collections" / digest
    link = base / "ansible_collections" / COLLECTION_NAMESPACE / COLLECTION_NAME
    if not (link.is_symlink() and link.resolve() == root):
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{COLLECTION_NAME}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(root, target_is_directory=True)
        tmp.replace(link)  # atomic: concurrent runs never see a missing link
    return base


def venv_bin() -> Path:
    """The bin directory of the Python running zenops (where ansible-playbook was installed with it)."""
    return Path(sys.executable).parent


def playbook(name: str) -> Path:
    path = collection_root() / "playbooks" / f"{name}.yml"
    if not path.is_file():
        raise ZenopsError(f"playbook {path} is missing from the zenops collection; the install is incomplete")
    return path


def main() -> None:
    """``python -m zenops.paths``: print the collections path (for molecule, ansible-playbook and scripts)."""
    print(collections_path())


if __name__ == "__main__":
    main()
