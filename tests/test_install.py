"""A non-editable install finds its configs from any directory (slow: builds a wheel)."""

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_installed_package_composes_configs_outside_the_checkout(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    bin_dir = env_dir / "bin"
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-deps", str(ROOT)]
    subprocess.run(pip, check=True)
    result = subprocess.run(
        [str(bin_dir / "nmt-train"), "--cfg", "model=gru_luong", "model.attention=concat"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "attention: concat" in result.stdout and "decoder: luong" in result.stdout
    where = subprocess.run(
        [
            str(bin_dir / "python"),
            "-c",
            "import nmt.cli.compose; print(nmt.cli.compose.config_dir())",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "site-packages" in where, where
    assert sys.prefix != str(env_dir)
