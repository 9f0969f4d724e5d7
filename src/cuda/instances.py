"""The one rule of the kernels' generated instance files (each folder's generate.py builds the texts): write a file
only when its text changed (so the build's timestamps stay), and delete the files the list no longer has."""
import pathlib


def write_instances(folder: pathlib.Path, prefix: str, files: dict) -> None:
    """Makes `folder`'s `prefix`*.cu files exactly `files` ({file name: text})."""
    for name, text in files.items():
        path = folder / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    for stale in folder.glob(f"{prefix}*.cu"):
        if stale.name not in files:
            stale.unlink()
