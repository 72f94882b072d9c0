"""Device models as data: Ethos-U55/U65/U85 NPUs, a Mali GPU class and the host CPU.

Each ``DeviceModel`` holds throughput and memory parameters, and ``sources`` says where each
number comes from. The Ethos-U numbers are those Vela 5.2 itself uses when it is given no system
configuration (``vela.ini`` in ``ethosu/config_files/Arm`` and ``architecture_features.py``):

* U55: system config ``Ethos_U55_High_End_Embedded`` (500 MHz, AXI 8 bytes/cycle, SRAM clock
  scale 1.0, off-chip flash clock scale 0.125), memory mode ``Shared_Sram``;
* U65: ``Ethos_U65_Client_Server`` (1 GHz, AXI 16 bytes/cycle, DRAM clock scale 0.75), memory
  mode ``Dedicated_Sram_384KB``;
* U85: ``Ethos_U85_SYS_DRAM_Mid`` (1 GHz, AXI 16 bytes/cycle, 2 SRAM ports, 1 DRAM port at clock
  scale 0.75), memory mode ``Dedicated_Sram_384KB``.

Vela prints these as "Design peak SRAM/DRAM bandwidth" (e.g. 29.80 GiB/s = 32 B/cycle x 1 GHz for
U85); the bandwidths below are bytes per NPU cycle. The MAC count is the number in the config name
(Vela: ``num_macs_per_cycle = int(accelerator_config.split("-")[-1])``, 8-bit MACs). Numbers no
tool states (memory sizes of a system, the Mali and CPU parameters) are marked "assumed".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tosa_jax.errors import TosaHardwareError

VELA_INI = "Vela 5.2 ethosu/config_files/Arm/vela.ini"
VELA_ARCH = "Vela 5.2 ethosu/vela/architecture_features.py"


@dataclass(frozen=True)
class DeviceModel:
    """One device: what it is and how fast it computes and moves data.

    ``macs_per_cycle`` is 8-bit integer MACs per cycle; ``int16_macs_per_cycle`` and
    ``fp32_macs_per_cycle`` are the rates for 16-bit integer and FP32 (0: not supported).
    Bandwidths are bytes per device cycle; ``dram_*`` is the off-chip memory (flash or DRAM).
    """

    name: str
    kind: str  # "npu" | "gpu" | "cpu"
    family: str  # "ethos-u55" | "ethos-u65" | "ethos-u85" | "mali" | "cpu"
    macs_per_cycle: int
    clock_hz: float
    sram_bytes: int
    dram_bytes: int
    sram_bw_bytes_per_cycle: float
    dram_bw_bytes_per_cycle: float
    int16_macs_per_cycle: int = 0
    fp32_macs_per_cycle: int = 0
    vela_accelerator: str | None = None  # Vela's --accelerator-config, for NPUs
    vela_system_config: str | None = None
    vela_memory_mode: str | None = None
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def peak_macs_per_second(self) -> float:
        return self.macs_per_cycle * self.clock_hz

    @property
    def sram_bw_bytes_per_second(self) -> float:
        return self.sram_bw_bytes_per_cycle * self.clock_hz

    @property
    def dram_bw_bytes_per_second(self) -> float:
        return self.dram_bw_bytes_per_cycle * self.clock_hz


def _ethos(family: str, macs: int) -> DeviceModel:
    name = f"{family}-{macs}"
    ini = VELA_INI
    if family == "ethos-u55":
        clock, sram_bw, dram_bw = 500e6, 8.0, 1.0
        sys_cfg, mem_mode = "Ethos_U55_High_End_Embedded", "Shared_Sram"
        # Shared_Sram: the tensor arena lives in system SRAM whose size Vela does not fix.
        sram, dram = 2 * 2**20, 8 * 2**20
        src_sram = ("assumed: 2 MiB system SRAM (Corstone-300 class); Vela's Shared_Sram mode "
                    "sets no size")
        src_dram = "assumed: 8 MiB off-chip flash for weights (Vela: axi1_port=OffChipFlash)"
        src_bw = (f"{ini} [Ethos_U55_High_End_Embedded]: Sram_clock_scale=1.0 x {VELA_ARCH} "
                  "U55 axi_port_bytes_per_cycle=8 x 1 port")
        src_dbw = (f"{ini} [Ethos_U55_High_End_Embedded]: OffChipFlash_clock_scale=0.125 x 8 "
                   "bytes/cycle (Vela prints 0.47 GB/s)")
        i16 = macs // 2
    else:
        clock = 1e9
        sram_bw = 16.0 if family == "ethos-u65" else 32.0
        dram_bw = 12.0
        sys_cfg = "Ethos_U65_Client_Server" if family == "ethos-u65" else "Ethos_U85_SYS_DRAM_Mid"
        mem_mode = "Dedicated_Sram_384KB"
        sram, dram = 384 * 1024, 2**30
        src_sram = (f"{ini} [Memory_Mode.Dedicated_Sram_384KB]: arena_cache_size=393216 "
                    "(Vela's default memory mode)")
        src_dram = "assumed: 1 GiB DRAM (Vela Dedicated_Sram mode: arena and weights in DRAM)"
        ports = "1 port" if family == "ethos-u65" else "Sram_ports_used=2"
        src_bw = (f"{ini} [{sys_cfg}]: Sram_clock_scale=1.0, {ports} x {VELA_ARCH} "
                  "axi_port_bytes_per_cycle=16")
        src_dbw = (f"{ini} [{sys_cfg}]: Dram_clock_scale=0.75 x 16 bytes/cycle x 1 port "
                   "(Vela prints 11.18 GB/s)")
        i16 = macs // 2
    return DeviceModel(
        name=name, kind="npu", family=family, macs_per_cycle=macs, clock_hz=clock,
        sram_bytes=sram, dram_bytes=dram, sram_bw_bytes_per_cycle=sram_bw,
        dram_bw_bytes_per_cycle=dram_bw, int16_macs_per_cycle=i16, fp32_macs_per_cycle=0,
        vela_accelerator=name, vela_system_config=sys_cfg, vela_memory_mode=mem_mode,
        description=f"Arm {family.replace('ethos-u', 'Ethos-U')} with {macs} MACs/cycle",
        sources=MappingProxyType({
            "macs_per_cycle": f"{VELA_ARCH}: num_macs_per_cycle = the number in '{name}'",
            "clock_hz": f"{ini} [{sys_cfg}]: core_clock (Vela's default system config)",
            "sram_bytes": src_sram,
            "dram_bytes": src_dram,
            "sram_bw_bytes_per_cycle": src_bw,
            "dram_bw_bytes_per_cycle": src_dbw,
            "int16_macs_per_cycle": "assumed: half the 8-bit rate (16-bit IFM x 8-bit weights "
                                    "take two passes, Arm Ethos-U TRM MAC unit description)",
            "fp32_macs_per_cycle": "Vela SUPPORTED_OPS.md: TOSA support is PRO-INT only",
        }),
    )


def _build() -> dict[str, DeviceModel]:
    devices: dict[str, DeviceModel] = {}
    for family, macs_list in (("ethos-u55", (32, 64, 128, 256)), ("ethos-u65", (256, 512)),
                              ("ethos-u85", (128, 256, 512, 1024, 2048))):
        for macs in macs_list:
            d = _ethos(family, macs)
            devices[d.name] = d
    # Mali-G710 MC10 as MediaTek ships it in the Dimensity 9000. Sources, as said per field:
    # AnandTech, "Arm Announces New Mali-G710, G610, G510 & G310" (2021-05-25), page 2: 7-16
    # cores, two execution engines per core, 64 FP32 FMA per core per cycle (G77/G78: 32);
    # Arm GPU datasheet (Mali-G710 column): 8-bit integer dot product; MediaTek Dimensity 9000
    # product page: Mali-G710 MC10, LPDDR5X 7500 Mbps. What no public source gives (clock of a
    # given SoC's GPU, L2 size and bandwidth, dispatch cost) is "assumed" and said so.
    devices["mali-g710"] = DeviceModel(
        name="mali-g710", kind="gpu", family="mali", macs_per_cycle=2560, clock_hz=850e6,
        sram_bytes=2 * 2**20, dram_bytes=8 * 2**30, sram_bw_bytes_per_cycle=128.0,
        dram_bw_bytes_per_cycle=60e9 / 850e6, int16_macs_per_cycle=1280,
        fp32_macs_per_cycle=640,
        description="Arm Mali-G710 MC10 (Valhall), via the ML SDK for Vulkan (model-converter)",
        sources=MappingProxyType({
            "macs_per_cycle": "derived: 10 cores (MediaTek Dimensity 9000: MC10) x 64 FP32 lanes "
                              "(AnandTech 2021-05-25) x 4 int8 products per lane (8-bit integer "
                              "dot product, Arm GPU datasheet)",
            "clock_hz": "assumed: 850 MHz (reported for the Dimensity 9000's G710; Arm "
                        "publishes no clock)",
            "sram_bytes": "assumed: 2 MiB L2 (Arm: configurable; the SoC's size is not public)",
            "dram_bytes": "assumed: 8 GiB LPDDR5X shared with the CPU",
            "sram_bw_bytes_per_cycle": "assumed: 128 bytes/cycle L2 bandwidth",
            "dram_bw_bytes_per_cycle": "derived: LPDDR5X 7500 Mbps x 64-bit bus (MediaTek "
                                       "Dimensity 9000) = 60 GB/s, / 850 MHz",
            "int16_macs_per_cycle": "assumed: half the int8 rate (no public int16 rate)",
            "fp32_macs_per_cycle": "published: 10 cores x 64 FP32 FMA per core per cycle "
                                   "(AnandTech 2021-05-25, Arm's Mali-G710 briefing)",
        }),
    )
    devices["cpu"] = DeviceModel(
        name="cpu", kind="cpu", family="cpu", macs_per_cycle=32, clock_hz=2.0e9,
        sram_bytes=1 * 2**20, dram_bytes=8 * 2**30, sram_bw_bytes_per_cycle=32.0,
        dram_bw_bytes_per_cycle=8.0, int16_macs_per_cycle=16, fp32_macs_per_cycle=8,
        description="Host CPU (Cortex-A class core with Neon), runs every TOSA operator",
        sources=MappingProxyType({
            "macs_per_cycle": "assumed: 2 x 128-bit Neon SDOT pipes = 32 int8 MACs/cycle",
            "clock_hz": "assumed: 2.0 GHz",
            "sram_bytes": "assumed: 1 MiB L2 cache",
            "dram_bytes": "assumed: 8 GiB",
            "sram_bw_bytes_per_cycle": "assumed: 32 bytes/cycle L2 bandwidth",
            "dram_bw_bytes_per_cycle": "assumed: 16 GB/s / 2 GHz = 8 bytes/cycle",
            "int16_macs_per_cycle": "assumed: half the int8 rate",
            "fp32_macs_per_cycle": "assumed: 2 x 128-bit Neon FMA pipes = 8 FP32 MACs/cycle",
        }),
    )
    return devices


DEVICES: dict[str, DeviceModel] = _build()

# Vela's accelerator configs (the Ethos-U device names).
ETHOS_U_CONFIGS: tuple[str, ...] = tuple(n for n, d in DEVICES.items() if d.kind == "npu")


def get_device(name: str) -> DeviceModel:
    """The device model called ``name``; ``TosaHardwareError`` listing the known names if none."""
    key = name.strip().lower().replace("_", "-")
    try:
        return DEVICES[key]
    except KeyError:
        raise TosaHardwareError(
            f"unknown device {name!r}; known devices: {', '.join(DEVICES)}") from None
