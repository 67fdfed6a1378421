"""The real-code regression corpus: public training repositories, judged by hand.

Precision and recall of the rules are measured on code nobody here wrote
(docs/accuracy.md, "Findings on real code"). The corpus is others' code, so
it is never committed: this script recreates it from snapshots of the
repositories named in :data:`REPOSITORIES`, each pinned to a commit.

Each snapshot is a bare git directory (as the search tool's ``fetch`` leaves
them under ``/work/.mirror/<owner>+<name>/repo``, or any clone: ``--mirror
DIR`` names the directory that holds ``<owner>+<name>/``). Only ``.py`` and
``.ipynb`` files of the pinned commit are extracted, under
``OUT/<owner>+<name>/<path>``; a repository whose snapshot is missing, or
lacks the pinned commit, is reported and skipped.

Usage::

    python tests/benchmarks/real_corpus.py --out /work/corpus
    memlint check --exit-zero --format json /work/corpus > findings.json
    python tests/benchmarks/real_corpus.py --out /work/corpus --count   # files and non-blank lines
"""

from __future__ import annotations

import argparse
import fnmatch
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MIRROR = Path("/work/.mirror")
EXTENSIONS = (".py", ".ipynb")


@dataclass(frozen=True)
class Repository:
    """One public repository of the corpus: its GitHub name, the commit
    extracted, and the path globs left out (vendored code, docs builds)."""

    name: str
    commit: str
    style: str
    exclude: tuple[str, ...] = ()

    @property
    def directory(self) -> str:
        return self.name.replace("/", "+")


#: The repositories, in the styles the rules must read: plain scripts,
#: trainer classes, Lightning, HF Trainer / accelerate, research repos,
#: Keras / TensorFlow 1 and 2, RL rollouts. Commits as fetched on 2026-12-01.
REPOSITORIES = (
    Repository("pytorch/examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8", "plain PyTorch scripts"),
    Repository("karpathy/nanoGPT", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291", "single training script, DDP"),
    Repository("karpathy/minGPT", "37baab71b9abea1b76ab957409a1cc2fbfba8a26", "trainer class"),
    Repository("salesforce/awd-lstm-lm", "1d466ec5875675ca6b6f0caacbb741240a29da9e", "RNN language model, TBPTT"),
    Repository("optuna/optuna-examples", "2e0b10bc54501e801687e114de3cbe1b6d2407dc", "Optuna objectives, Keras, PyTorch, Lightning"),
    Repository("eriklindernoren/PyTorch-GAN", "36d3c77e5ff20ebe0aeefd322326a134a279b93e", "GAN scripts, two optimizers"),
    Repository("lucidrains/denoising-diffusion-pytorch", "faed4db28e724735323fa91c70aa9b28a6e1cbac", "research library with trainer, accelerate"),
    Repository("huggingface/pytorch-image-models", "aa4b5850c1543fa488abf260f18390eda46cf85d", "timm: model library and training scripts"),
    Repository("huggingface/accelerate", "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83", "accelerate loops and library"),
    Repository("Lightning-AI/litgpt", "26857050fe3ff627cd714fe92f5838f51a3d5efa", "Fabric training loops"),
    Repository("Lightning-AI/pytorch-lightning", "7f0c3436cd3f6ad3753125672024fc415cbcb414", "Lightning framework and examples"),
    Repository("openai/whisper", "c0d2f624c09dc18e709e37c2ad90c039a4eb72a2", "inference library"),
    Repository("openai/guided-diffusion", "22e0df8183507e13a7813f8d38d51b072ca1e67c", "diffusion training loop class"),
    Repository("openai/baselines", "ea25b9e8b234e6ee1bca43083f8f3cf974143998", "TensorFlow 1 RL"),
    Repository("DLR-RM/stable-baselines3", "e05d2dbe6eda0acd0ef2e316e3e4065677add3eb", "PyTorch RL rollouts"),
    Repository("facebookresearch/dino", "7c446df5b9f45747937fb0d72314eb9f7b66930a", "self-supervised training, EMA teacher"),
    Repository("facebookresearch/mae", "efb2a8062c206524e35e47d04501ed4f544c0ae8", "engine_* training functions"),
    Repository("facebookresearch/detr", "29901c51d7fe8712168b8d0d64351170bc0f83e0", "engine-style detection training"),
    Repository("huggingface/trl", "f2cd57710ae345ea6428ae95363267fcf38a3dc8", "HF Trainer subclasses"),
    Repository("huggingface/peft", "5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40", "adapters library, examples, tests"),
    Repository("kuangliu/pytorch-cifar", "49b7aa97b0c12fe0d4054e670403a16b6b834ddd", "classic CIFAR script"),
    Repository("yunjey/pytorch-tutorial", "0500d3df5a2a8080ccfccbc00aca0eacc21818db", "tutorial scripts"),
    Repository("jadore801120/attention-is-all-you-need-pytorch", "132907dd272e2cc92e3c10e6c4e783a87ff8893d", "seq2seq training"),
    Repository("CompVis/taming-transformers", "3ba01b241669f5ade541ce990f7650a3b8f65318", "Lightning research code"),
    Repository("ultralytics/yolov5", "5081342f04fb287fc2e5f2b5a4e06752b7937b1c", "detection training, EMA, AMP"),
    Repository("aymericdamien/TensorFlow-Examples", "6dcbe14649163814e72a22a999f20c5e247ce988", "TensorFlow 1 and 2 examples"),
    Repository("carpedm20/DCGAN-tensorflow", "62c9a2a7f74505cad30858bf40307c93e5bd9293", "TensorFlow 1 GAN"),
    Repository("tensorflow/examples", "608f7db8c511e3dcc420afc564496e4516ceb800", "TensorFlow 2 / Keras"),
)


def git_dir(mirror: Path, repository: Repository) -> Path | None:
    """The git directory of ``repository``'s snapshot under ``mirror``, or None."""
    base = mirror / repository.directory / "repo"
    for candidate in (base / ".git", base):
        if (candidate / "HEAD").is_file():
            return candidate
    return None


def _git(directory: Path, *arguments: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={directory}", *arguments], check=True, capture_output=True).stdout


def tracked_files(directory: Path, repository: Repository) -> list[str]:
    """The corpus paths of ``repository`` at its pinned commit (sorted)."""
    listing = _git(directory, "ls-tree", "-r", "--name-only", "-z", repository.commit).decode("utf-8", "surrogateescape")
    paths = [path for path in listing.split("\0") if path.endswith(EXTENSIONS)]
    return sorted(path for path in paths if not any(fnmatch.fnmatch(path, glob) for glob in repository.exclude))


def extract(mirror: Path, out: Path, only: set[str] | None = None) -> int:
    """Write every corpus file under ``out``; returns the number of repositories missing."""
    missing = 0
    for repository in REPOSITORIES:
        if only and repository.name not in only:
            continue
        directory = git_dir(mirror, repository)
        if directory is None:
            print(f"missing: {repository.name} (no snapshot under {mirror / repository.directory})", file=sys.stderr)
            missing += 1
            continue
        try:
            paths = tracked_files(directory, repository)
        except subprocess.CalledProcessError:
            print(f"missing: {repository.name} (commit {repository.commit} not in the snapshot)", file=sys.stderr)
            missing += 1
            continue
        absent = 0
        for path in paths:
            try:
                data = _git(directory, "show", f"{repository.commit}:{path}")
            except subprocess.CalledProcessError:
                absent += 1  # snapshots leave out files of 4 MiB and more
                continue
            target = out / repository.directory / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        print(f"{repository.name}: {len(paths) - absent} files" + (f" ({absent} absent from the snapshot)" if absent else ""))
    return missing


def count(out: Path) -> tuple[int, int]:
    """(files, non-blank lines) of the ``.py`` files under ``out``."""
    files = lines = 0
    for path in sorted(out.rglob("*.py")):
        files += 1
        text = path.read_bytes().decode("utf-8", "replace")
        lines += sum(1 for line in text.splitlines() if line.strip())
    return files, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write the corpus into")
    parser.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="directory holding <owner>+<name>/repo snapshots")
    parser.add_argument("--only", action="append", help="extract only this owner/name (repeatable)")
    parser.add_argument("--count", action="store_true", help="print files and non-blank lines of an extracted corpus")
    args = parser.parse_args()
    if args.count:
        files, lines = count(args.out)
        print(f"{files} .py files, {lines} non-blank lines")
        return 0
    return 1 if extract(args.mirror, args.out, set(args.only or ())) else 0


if __name__ == "__main__":
    sys.exit(main())
