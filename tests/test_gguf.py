"""GGUF files (tlgpu.quant.load_gguf / save_gguf through the gguf package): a save -> load round trip of
every supported type (F32, F16, BF16, Q4_0, Q8_0) and of the metadata; the dimension order in the file
(ggml's ne[], the reverse of numpy's shape) and the quantized payloads checked with the package's own
reader and dequantize; a file written by the package itself; refusal of an unsupported type by name;
ValueError on truncated and corrupt files."""
import ml_dtypes
import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (make test installs it; pip install gguf)")

import tlgpu
from tlgpu import quant

T = gguf.GGMLQuantizationType


def sample(rng):
    w = rng.standard_normal((6, 96)).astype(np.float32)
    return {
        "f32": tlgpu.tensor(rng.standard_normal((3, 5)).astype(np.float32)),
        "f32_1d": rng.standard_normal(7).astype(np.float32),                  # a numpy array is taken too
        "f16": tlgpu.tensor(rng.standard_normal((2, 3, 4)).astype(np.float16)),
        "bf16": tlgpu.tensor(rng.standard_normal((4, 7)).astype(np.float32).astype(ml_dtypes.bfloat16)),
        "blk.0.q4": quant.quantize_q4_0(w),
        "blk.0.q8": quant.quantize_q8_0(w * 3),
    }


META = {"general.architecture": "llama", "general.name": "tiny", "llama.block_count": 2,
        "llama.rope.freq_base": 10000.0, "flag": True, "ids": [3, 1, 4], "toks": ["a", "bc"]}


def test_roundtrip(rng, tmp_path):
    src = sample(rng)
    path = tmp_path / "m.gguf"
    quant.save_gguf(path, src, META)
    got, meta = quant.load_gguf(str(path))
    assert list(got) == list(src)
    for key, val in META.items():
        assert meta[key] == (pytest.approx(val) if isinstance(val, float) else val), key
    for name, t in src.items():
        g = got[name]
        if isinstance(t, quant._Quantized):
            assert type(g) is type(t) and g.shape == t.shape
            assert g.to_bytes() == t.to_bytes()
        else:
            a = t.numpy() if isinstance(t, tlgpu.Tensor) else t
            assert isinstance(g, tlgpu.Tensor) and g.dtype == str(a.dtype) and tuple(g.shape) == a.shape
            assert g.numpy().tobytes() == a.tobytes()


def test_layout_matches_gguf_package(rng, tmp_path):
    src = sample(rng)
    path = tmp_path / "m.gguf"
    quant.save_gguf(path, src)
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    assert tensors["f32"].shape.tolist() == [5, 3]                 # ne[]: numpy's shape reversed
    assert tensors["f16"].shape.tolist() == [4, 3, 2] and tensors["f16"].tensor_type == T.F16
    assert tensors["bf16"].tensor_type == T.BF16
    for name, kind in (("blk.0.q4", T.Q4_0), ("blk.0.q8", T.Q8_0)):
        t = tensors[name]
        assert t.tensor_type == kind and t.shape.tolist() == [96, 6]
        np.testing.assert_array_equal(gguf.quants.dequantize(t.data, kind), src[name].dequantize().numpy())
    bf = gguf.quants.dequantize(tensors["bf16"].data, T.BF16)
    np.testing.assert_array_equal(bf, src["bf16"].numpy().astype(np.float32))


def test_file_from_gguf_package(rng, tmp_path):
    """A file the package writes (its own quantizers): loads into matrices that match its dequantize."""
    w = rng.standard_normal((5, 64)).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    path = tmp_path / "p.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_uint32("llama.context_length", 128)
    for kind in (T.Q4_0, T.Q8_0):
        writer.add_tensor(kind.name, gguf.quants.quantize(w, kind), raw_dtype=kind)
    writer.add_tensor("norm", w[0])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    got, meta = quant.load_gguf(path)
    assert meta["llama.context_length"] == 128 and meta["general.architecture"] == "llama"
    np.testing.assert_array_equal(got["norm"].numpy(), w[0])
    for kind in (T.Q4_0, T.Q8_0):
        deq = gguf.quants.dequantize(gguf.quants.quantize(w, kind), kind)
        np.testing.assert_array_equal(got[kind.name].dequantize().numpy(), deq)
        int8 = tlgpu.device().type == "gpu" or tlgpu._C._cpu_quant()["active"]   # int8 activations (test_llm)
        tol = 2e-2 if int8 else 1e-4
        np.testing.assert_allclose(quant.matmul(tlgpu.tensor(x), got[kind.name]).numpy(), x @ deq.T, rtol=tol,
                                   atol=tol * np.abs(x @ deq.T).max())


def test_unsupported_type_refused(rng, tmp_path):
    path = tmp_path / "q5.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    w = rng.standard_normal((2, 64)).astype(np.float32)
    writer.add_tensor("w", gguf.quants.quantize(w, T.Q5_0), raw_dtype=T.Q5_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="'w'.*Q5_0"):
        quant.load_gguf(path)
    with pytest.raises(TypeError, match="int32"):
        quant.save_gguf(tmp_path / "i.gguf", {"i": tlgpu.tensor(np.arange(3, dtype=np.int32))})


def test_truncated_and_corrupt(rng, tmp_path):
    path = tmp_path / "m.gguf"
    quant.save_gguf(path, sample(rng), META)
    data = path.read_bytes()
    bad = tmp_path / "bad.gguf"
    for n in (0, 3, 24, 100, len(data) // 2, len(data) - 100):
        bad.write_bytes(data[:n])
        with pytest.raises(ValueError, match="load_gguf"):
            quant.load_gguf(bad)
    bad.write_bytes(b"GGML" + data[4:])                          # wrong magic
    with pytest.raises(ValueError, match="load_gguf"):
        quant.load_gguf(bad)
    junk = bytearray(data)
    junk[8:16] = (10 ** 9).to_bytes(8, "little")              # an absurd tensor count
    bad.write_bytes(bytes(junk))
    with pytest.raises(ValueError, match="load_gguf"):
        quant.load_gguf(bad)


@pytest.mark.parametrize("kind", [None, "q8_0", "q4_0"])
def test_tiny_decoder_from_a_gguf_file_decodes_as_from_memory(tmp_path, kind):
    """examples/tiny_decoder.py writes its weights as a llama-architecture GGUF (llama.cpp's tensor names and
    keys) through the gguf package, reads it back with Decoder.from_gguf (load_gguf, projections joined on the
    device) and gives the in-memory decoder's logits and tokens."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import tiny_decoder as td
    cfg = td.Config(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=24)
    w = td.make_weights(cfg, seed=11)
    path = tmp_path / "tiny.gguf"
    td.save_gguf(path, cfg, w, kind)
    _, meta = quant.load_gguf(path)
    assert meta["general.architecture"] == "llama" and meta["llama.block_count"] == 2
    mem, disk = td.Decoder(cfg, w, kind=kind), td.Decoder.from_gguf(path)
    import dataclasses
    assert dataclasses.replace(disk.cfg, eps=cfg.eps) == cfg and disk.weight_bytes == mem.weight_bytes
    assert disk.cfg.eps == pytest.approx(cfg.eps, rel=1e-6)           # GGUF keeps it as float32
    for pos, tok in enumerate([3, 17, 5, 40]):
        np.testing.assert_allclose(disk.step(tok, pos).numpy(), mem.step(tok, pos).numpy(), rtol=1e-6, atol=1e-6)
    assert disk.generate([1, 2, 3], 6) == mem.generate([1, 2, 3], 6)
