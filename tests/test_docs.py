"""The documentation quotes the code it explains: docs/attention.md's excerpts must match it."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_attention_page_quotes_the_current_code():
    script = ROOT / "scripts" / "attention_doc.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
