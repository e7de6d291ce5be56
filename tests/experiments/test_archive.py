"""The shipped results as one archive (``vitplast.experiments.archive``): every shipped store of the
study registry packed, unpacked beside an installed copy and read back through ``VITPLAST_DATA``;
damaged archives, clashes and stores their schema refuses are refused, naming the file."""

import io
import json
import tarfile
from dataclasses import replace

import pytest
from helpers import TINY

from vitplast import files
from vitplast.experiments import archive, results, runs, studies, sweep
from vitplast.experiments.store import Store
from vitplast.measure.fingerprint import measuring

COMPANION = dict(tasks=["digits"], target="LN1", n_pairs=8, plasticity={"LN1": 0.5, "FC1": 1.2},
                 scales={"LN1": 2.4})


@pytest.fixture
def data(tmp_path, monkeypatch, fake_train):
    """``$VITPLAST_DATA`` with every shipped store: two records of a real (fake-trained) sweep
    in ``finetune``, with a companion, a README and what a sweep leaves behind (its lock, a
    young temp file); the other stores hold a README only."""
    root = tmp_path / "data"
    monkeypatch.setenv(files.DATA_ENV, str(root))
    for store in archive.shipped_stores():
        (root / store).mkdir(parents=True)
        (root / store / "README.md").write_text(f"# {store}\n")
    finetune = root / "finetune"
    sweep.run_sweep([runs.make_run("digits", lr=lr, **TINY) for lr in (0.1, 0.2)], finetune,
                    device="cpu", progress=False)
    Store(finetune).write_companion("scales-0123456789abcdef.json", COMPANION)
    (finetune / ".0123456789abcdef.json.x.tmp").write_text("{")  # a write in progress
    return root


def test_the_shipped_stores_are_the_registry_s():
    assert archive.shipped_stores() == {"finetune": ["main", "budget"],
                                        "confounds": ["confounds"], "suite": ["suite"],
                                        "gauge": ["gauge"], "suite_length": ["length"],
                                        "real_vit": ["real"]}


def test_a_new_shipped_study_is_packed_without_a_list_to_edit(monkeypatch):
    extra = replace(studies.get("gauge"), name="gauge2", folder="gauge2")
    monkeypatch.setattr(studies, "STUDIES", {**studies.STUDIES, "gauge2": extra})
    assert archive.shipped_stores()["gauge2"] == ["gauge2"]
    assert "main-smoke" not in sum(archive.shipped_stores().values(), [])  # a cache store


def test_pack_unpack_and_read_back(data, tmp_path, monkeypatch):
    packed = archive.pack(tmp_path / "dist")
    assert packed == tmp_path / "dist" / f"{archive.archive_name()}.tar.gz"
    with tarfile.open(packed) as tar:
        names = tar.getnames()
    top = archive.archive_name()
    records = sorted(p.name for p in (data / "finetune").glob("*.json"))
    assert len(records) == 3  # two records and the companion
    assert sorted(names) == sorted(
        [f"{top}/{archive.MANIFEST}"] + [f"{top}/finetune/{n}" for n in records]
        + [f"{top}/{store}/README.md" for store in archive.shipped_stores()])  # no lock, no temp

    dest = archive.unpack(packed, tmp_path / "installed")
    assert dest == tmp_path / "installed"
    assert sorted(p.name for p in dest.iterdir()) == sorted(archive.shipped_stores())  # no debris
    before = results.records_table(data / "finetune")
    monkeypatch.setenv(files.DATA_ENV, str(dest))  # what the user exports
    after = results.records_table(studies.get("main").root())
    assert studies.get("main").root() == dest / "finetune"
    assert len(after) == 2 and after["run"].tolist() == before["run"].tolist()
    assert after["test_acc"].tolist() == before["test_acc"].tolist() == [0.25, 0.25]
    read = Store(dest / "finetune").companion("scales-0123456789abcdef.json")
    assert read == dict(COMPANION, measured_by=measuring())  # stamped: a measurement


def test_unpack_refuses_a_damaged_archive_and_moves_nothing(data, tmp_path):
    packed = archive.pack(tmp_path / "dist")
    damaged = tmp_path / "damaged.tar.gz"
    with tarfile.open(packed) as tar, tarfile.open(damaged, "w:gz") as out:
        for member in tar.getmembers():
            content = tar.extractfile(member).read()
            if member.name.endswith(".json") and "/finetune/" in member.name \
                    and "scales" not in member.name:
                record = json.loads(content)
                record["test_acc"] = 0.99  # an edited result
                content = json.dumps(record).encode()
                member.size = len(content)
            out.addfile(member, io.BytesIO(content))
    with pytest.raises(ValueError, match="differs from the archive's manifest"):
        archive.unpack(damaged, tmp_path / "installed")
    assert list((tmp_path / "installed").iterdir()) == []  # nothing moved, no scratch left


def test_unpack_refuses_to_overwrite_and_foreign_archives(data, tmp_path):
    packed = archive.pack(tmp_path / "dist")
    archive.unpack(packed, tmp_path / "installed")
    with pytest.raises(FileExistsError, match="already holds"):
        archive.unpack(packed, tmp_path / "installed")
    other = tmp_path / "other.tar.gz"
    with tarfile.open(other, "w:gz") as tar:
        tar.add(data / "finetune" / "README.md", "README.md")
    with pytest.raises(ValueError, match="not an archive of `vitplast data pack`"):
        archive.unpack(other, tmp_path / "elsewhere")
    escaping = tmp_path / "escaping.tar.gz"
    with tarfile.open(escaping, "w:gz") as tar:
        tar.add(data / "finetune" / "README.md", "../outside.md")
    with pytest.raises(ValueError, match="not a readable archive"):
        archive.unpack(escaping, tmp_path / "elsewhere")
    assert not (tmp_path / "outside.md").exists()


def test_pack_refuses_an_absent_store_or_one_its_schema_refuses(data, tmp_path):
    (data / "finetune" / "notes.json").write_text('{"mine": 1}')  # a foreign JSON
    with pytest.raises(ValueError, match="notes.json .foreign"):
        archive.pack(tmp_path / "dist")
    (data / "finetune" / "notes.json").unlink()
    (data / "gauge" / "README.md").unlink()
    (data / "gauge").rmdir()
    with pytest.raises(FileNotFoundError, match="no results store at .*gauge"):
        archive.pack(tmp_path / "dist")
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").iterdir())


def test_a_store_s_folders_travel_with_it(tmp_path):
    """The files in a store's folders travel too, by their path in the store (the real-model
    store's ``measurements/``, which notebook 02c reads); claims and locks never."""
    (tmp_path / "measurements").mkdir()
    (tmp_path / "measurements" / "layers.csv").write_text("a\n")
    (tmp_path / "runs.csv").write_text("b\n")
    (tmp_path / "x.claim").write_text("")
    assert list(archive._files(tmp_path)) == ["measurements/layers.csv", "runs.csv"]
