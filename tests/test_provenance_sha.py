"""fo_lib.provenance.git_sha: a record names the tree it was measured on, and says when that tree
is not the commit its .git points at (the GPU machine gets a copy of the working tree)."""
import subprocess

from fo_lib import provenance


def _repo(path):
    def git(*args):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("commit", "-qm", "one")
    return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=path, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_changed_tracked_file_marks_the_sha_dirty(tmp_path, monkeypatch):
    monkeypatch.delenv("FO_GIT_SHA", raising=False)
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    sha = _repo(tmp_path)
    assert provenance.git_sha() == sha
    (tmp_path / "new.txt").write_text("untracked files do not count\n")
    assert provenance.git_sha() == sha
    (tmp_path / "a.txt").write_text("two\n")
    assert provenance.git_sha() == sha + "+dirty"
    monkeypatch.setenv("FO_GIT_SHA", "abc1234")
    assert provenance.git_sha() == "abc1234"
