#!/usr/bin/env python3
"""Writes the H100 platforms of the twin (docs/twin.md) from one set of
published numbers, so the three files cannot disagree:

    python3 tools/twin/platforms/fabric.py      # rewrites the three files

  h100-node.xml  one DGX H100-class node: 8 GPUs through one NVSwitch
  4x8-ib.xml     4 such nodes, one InfiniBand port per GPU to one leaf switch
  scaled.xml     64 such nodes (512 GPUs) over a two-level fat tree: 16 leaf
                 switches of 32 GPUs, 8 spines; a replay at P ranks (--ranks)
                 uses the first P GPUs, so 8 to 512 ranks share one file

Each file is a SimGrid platform a reader can open: a "DijkstraCache"
zone of hosts (GPUs), routers (switches), links and the routes between
neighbours; SimGrid finds each message's path as the fewest links (its
Dijkstra zone's cost), so two GPUs of one node talk through NVLink (2
links) and never through the network (4). tests/twin/test_twin.py checks
the committed files are what this writes."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GPUS_PER_NODE = 8
NODES_PER_LEAF = 4  # 32 GPU ports down, 32 up: a 64-port NDR switch
SPINES = 8

# Every number with its source. SimGrid units: GBps = 1e9 bytes/s, Tf = 1e12 FLOP/s.
SOURCES = """\
  Numbers (each with its source; "assumed" where no vendor publishes one):

    GPU speed    989 TFLOP/s: H100 SXM dense BF16 tensor-core rate (NVIDIA
                 H100 datasheet: 1,979 TFLOP/s with sparsity, half dense).
                 The replay uses it for every FLOP the record counted. The
                 FP32 non-tensor rate (67 TFLOP/s) would change no
                 element-wise op: the most FLOPs an element-wise op does per
                 byte (gelu's backward, 20 per 12 bytes; AdamW 16 per 28) is
                 below 67 / 3.35 = 20 FLOPs a byte, so they are bound by
                 memory at either rate; only matmuls see the tensor cores.
    memory_bw    3.35 TB/s: H100 SXM HBM3 (NVIDIA H100 datasheet). Compute
                 as "work": max(FLOPs / speed, bytes / memory_bw).
    NVLink       450 GB/s each way per GPU: NVLink 4, 900 GB/s
                 bidirectional per H100 SXM (18 links x 50 GB/s; datasheet),
                 a split-duplex link from each GPU to the NVSwitch. The
                 switch is non-blocking (DGX H100: 4 NVSwitch chips, 7.2 TB/s
                 bidirectional for 8 GPUs): a router, no limit of its own.
    NVLink lat   0.5 us per link, 1 us GPU to GPU: assumed (NVIDIA publishes
                 no end-to-end figure; NCCL's own small-message all-reduce
                 on one node runs in the 10s of us for 2 (p-1) steps).
    PCIe         64 GB/s each way: PCIe Gen5 x16 (PCI-SIG: 32 GT/s a lane,
                 16 lanes), GPU to its ConnectX-7 NIC; latency counted in
                 the InfiniBand link's.
    InfiniBand   50 GB/s each way: NDR 400 Gb/s, one ConnectX-7 port per
                 GPU (DGX H100: 8 single-port ConnectX-7 for compute).
    IB lat       1 us per GPU-to-leaf hop (NIC, cable): assumed (ConnectX-7
                 and Quantum-2 publish sub-microsecond port latencies; 1 us
                 rounds up for the NIC's and the PCIe's share).
    leaf-spine   4 NDR links of 50 GB/s from each leaf to each spine: 200
                 GB/s each way; 0.5 us a hop (assumed, one switch).
                 One fixed route per leaf pair (SimGrid has no ECMP): a
                 ring's one flow per leaf boundary fits, an all-to-all
                 across leaves would be too slow here.
"""


def header(name, what):
    return """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<!--
  %s: %s
  Written by tools/twin/platforms/fabric.py (edit the numbers there).

%s
  GPU r is host "gpu<r>"; rank r of a replay runs on gpu<r> (node r / 8).
-->
""" % (name, what, SOURCES)


def platform(name, what, nodes):
    gpus = nodes * GPUS_PER_NODE
    leaves = (nodes + NODES_PER_LEAF - 1) // NODES_PER_LEAF if nodes > 1 else 0
    spines = SPINES if leaves > 1 else 0
    out = [header(name, what), '<platform version="4.1">\n']
    out.append('  <config>\n    <!-- CM02: a message takes latency + bytes / bandwidth, no TCP factors -->\n'
               '    <prop id="network/model" value="CM02"/>\n  </config>\n')
    out.append('  <zone id="%s" routing="DijkstraCache">\n' % name)
    out.append('    <prop id="compute" value="work"/>\n    <prop id="memory_bw" value="3.35e12"/>\n')
    for n in range(nodes):
        out.append('    <router id="nvswitch%d"/>\n' % n)
    for leaf in range(leaves):
        out.append('    <router id="leaf%d"/>\n' % leaf)
    for s in range(spines):
        out.append('    <router id="spine%d"/>\n' % s)
    for g in range(gpus):
        out.append('    <host id="gpu%d" speed="989Tf"/>\n' % g)
        out.append('    <link id="nvl%d" bandwidth="450GBps" latency="0.5us" sharing_policy="SPLITDUPLEX"/>\n' % g)
        if leaves:
            out.append('    <link id="pcie%d" bandwidth="64GBps" latency="0us" sharing_policy="SPLITDUPLEX"/>\n' % g)
            out.append('    <link id="ib%d" bandwidth="50GBps" latency="1us" sharing_policy="SPLITDUPLEX"/>\n' % g)
    for leaf in range(leaves):
        for s in range(spines):
            out.append('    <link id="up%d-%d" bandwidth="200GBps" latency="0.5us" sharing_policy="SPLITDUPLEX"/>\n'
                       % (leaf, s))
    for g in range(gpus):
        node = g // GPUS_PER_NODE
        out.append('    <route src="gpu%d" dst="nvswitch%d"><link_ctn id="nvl%d" direction="UP"/></route>\n'
                   % (g, node, g))
        if leaves:
            out.append('    <route src="gpu%d" dst="leaf%d"><link_ctn id="pcie%d" direction="UP"/>'
                       '<link_ctn id="ib%d" direction="UP"/></route>\n' % (g, node // NODES_PER_LEAF, g, g))
    for leaf in range(leaves):
        for s in range(spines):
            out.append('    <route src="leaf%d" dst="spine%d"><link_ctn id="up%d-%d" direction="UP"/></route>\n'
                       % (leaf, s, leaf, s))
    out.append('  </zone>\n</platform>\n')
    return "".join(out)


PLATFORMS = {
    "h100-node": ("one node of 8 H100 SXM GPUs through one NVSwitch (DGX H100-class)", 1),
    "4x8-ib": ("4 H100 nodes (32 GPUs), one NDR InfiniBand port per GPU to one leaf switch", 4),
    "scaled": ("64 H100 nodes (512 GPUs) over a two-level NDR fat tree; a replay at P ranks uses gpu0 to gpu<P-1>",
               64),
}


def main():
    for name, (what, nodes) in PLATFORMS.items():
        with open(os.path.join(HERE, name + ".xml"), "w") as f:
            f.write(platform(name, what, nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
