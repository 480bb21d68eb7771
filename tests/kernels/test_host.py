"""Host probing reads what the CPU reports; the ISA label follows the flags, never an assumption."""
import torch

from haltwise.kernels.host import isa_label, probe, read_cpuinfo

X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse2 avx avx2 fma

processor\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse2 avx avx2 fma
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes crc32 bf16
CPU implementer\t: 0x41
"""


def test_reads_model_and_flags_of_x86_cpuinfo():
    model, flags = read_cpuinfo(X86)
    assert model == "AMD EPYC 7B13"
    assert flags == frozenset({"fpu", "sse2", "avx", "avx2", "fma"})


def test_reads_features_of_arm_cpuinfo():
    model, flags = read_cpuinfo(ARM)
    assert "asimd" in flags and "bf16" in flags
    assert isa_label(flags, "aarch64") == "neon"


def test_isa_label_is_the_widest_extension_reported():
    assert isa_label(frozenset({"avx2", "avx512f", "amx_tile", "amx_bf16"}), "x86_64") == "amx"
    assert isa_label(frozenset({"avx2", "avx512f"}), "x86_64") == "avx512"
    assert isa_label(frozenset({"avx2", "fma"}), "x86_64") == "avx2"
    assert isa_label(frozenset({"sse2"}), "x86_64") == "generic"


def test_probe_describes_this_host():
    host = probe()
    assert host.cpu_model and host.threads >= 1 and host.torch_version
    # the label agrees with what torch's own dispatcher found on this CPU
    capability = torch.backends.cpu.get_cpu_capability()
    if capability.startswith("AVX512"):
        assert host.isa in {"amx", "avx512"} and host.has("avx512f")
    elif capability == "AVX2":
        assert host.isa == "avx2" and host.has("avx2", "fma")
    assert host.has() and not host.has("no-such-flag")
    assert host.cpu_model in host.describe()
