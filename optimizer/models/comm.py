"""Collective communication of a training step: volumes, bandwidths, latency terms, as pure vectorised functions.

Every function returns seconds per GPU (arrays of shape (n,)) before any overlap with compute; timing.py decides
how much of each hides. Bandwidths are per GPU and direction (space.hardware builds them from the catalog).

    ring all-reduce      2 (n-1)/n x M / B  +  2 (n-1) x alpha
    ring all-gather      (n-1)/n x M / B    +  (n-1) x alpha        (reduce-scatter: the same)

M message bytes, B bus bandwidth, alpha the per-hop latency of the link the ring's slowest hop crosses (intra-node
or network). Volumes are the NCCL-tests busbw convention (formulas.md Part II section 3.2); the latency terms are
the alpha-beta cost model of ring collectives (Thakur, Rabenseifner and Gropp 2005, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), ring all-gather (p-1) alpha, ring all-reduce 2 (p-1) alpha).
At hundreds of ranks the latency term is what remains of a collective over a small message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.inputs.schema import Checkpointing
from optimizer.models.configs import CHECKPOINTING, Configs, Hardware, Job, row_tokens
from optimizer.models.memory import trainable_params

_CK_FULL = CHECKPOINTING.index(Checkpointing.full)


def ring(n: np.ndarray, factor: float) -> np.ndarray:
    """Ring collective volume factor: factor x (n-1)/n, 0 for a single rank (NCCL-tests busbw convention)."""
    n = n.astype(np.float64)
    return np.where(n > 1, factor * (n - 1) / n, 0.0)


def ring_latency(n: np.ndarray, nodes: np.ndarray, factor: float, consts: Mapping[str, Any]) -> np.ndarray:
    """Latency of one ring collective over n ranks spread over ``nodes`` nodes, seconds, (n,).

    factor x [(n - 1 - k) alpha_intra + k alpha_net], k = the ring's node crossings (``nodes`` when above 1, else 0):
    a ring of n ranks takes n - 1 steps per pass (all-gather, reduce-scatter: factor 1; all-reduce: 2), of which
    only the steps that cross a node boundary pay the network's latency (NCCL's ring model, src/graph/tuning.cc:
    nInterSteps = nNodes per pass; Thakur et al. 2005 for the (n - 1) alpha of ring collectives).
    """
    lat = consts["collective_latency_s"]
    n = n.astype(np.float64)
    k = np.where(nodes > 1, np.minimum(nodes, n), 0.0).astype(np.float64)
    steps = np.maximum(n - 1 - k, 0.0) * float(lat["intra"]) + k * float(lat["network"])
    return np.where(n > 1, factor * steps, 0.0)


def allreduce_latency(n: np.ndarray, nodes: np.ndarray, consts: Mapping[str, Any]) -> np.ndarray:
    """Latency of one all-reduce, seconds, (n,): the lower of the ring's and the tree's, as NCCL picks per size.

    ring: :func:`ring_latency` with two passes. tree (NCCL's double binary tree across nodes, a chain inside each):
    2 [(n / k - 1) alpha_intra + log2(k) alpha_net] for k > 1 nodes (NCCL src/graph/tuning.cc, tree latency
    model). At hundreds of ranks the tree's log2 k network hops beat the ring's k.
    """
    lat = consts["collective_latency_s"]
    k = np.maximum(nodes, 1).astype(np.float64)
    per_node = n.astype(np.float64) / k
    tree = 2.0 * ((per_node - 1.0) * float(lat["intra"]) + np.log2(k) * float(lat["network"]))
    ring_s = ring_latency(n, nodes, 2.0, consts)
    return np.where(nodes > 1, np.minimum(ring_s, tree), ring_s)


def dp_nodes(cfg: Configs, hw: Hardware) -> np.ndarray:
    """Nodes a data-parallel group spans: all of the job's nodes (its ranks are spread over them), at most d."""
    return np.minimum(hw.nodes, cfg.dp)


def dp_bandwidth(cfg: Configs, hw: Hardware) -> np.ndarray:
    """Bytes/s per GPU of a data-parallel ring, (n,).

    Inside a node: the intra-node link. Across nodes: the node's aggregate NIC bandwidth (hw.inter_bytes_per_s,
    space.hardware) is shared by the t x p data-parallel groups that have a rank in every node (each group's ring
    crosses every node boundary once), so one group gets inter / (t p) (capped by the node's cards); the slower of
    the two limits the ring.
    """
    groups = np.minimum(cfg.tp * cfg.pp, hw.cards_per_node).astype(np.float64)
    inter = hw.inter_bytes_per_s / np.maximum(groups, 1.0)
    return np.where(hw.nodes > 1, np.minimum(hw.intra_bytes_per_s, inter), hw.intra_bytes_per_s)


def zero_bandwidth(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Bytes/s per GPU of the ZeRO-2/3 (sharded data-parallel) collectives, (n,).

    :func:`dp_bandwidth` (the node's aggregate NIC bandwidth shared by its data-parallel groups), except on engines
    listed in ``zero_per_gpu_nic_engines`` (calibration ``timing``): there a sharded collective that spans nodes
    moves at one GPU's own NIC share, inter / g with g the job's cards in a node. Basis: DeepSpeed ZeRO-3 across
    Selene nodes (Narayanan et al. 2021, arXiv 2104.04473, Table 2 ZeRO-3 rows, tests/data/reference/
    throughput_cases_3.yaml): at 768 and 1,536 GPUs (175B) and 1,120 and 2,240 (530B) the step time stays the
    same while compute halves, and 6P bytes per GPU per step over that time is 15.7-17.6 GB/s, two thirds of the
    25 GB/s NIC per GPU, where the node aggregate (200 GB/s) would hide it behind compute. PyTorch FSDP reaches the
    node aggregate: fms-fsdp's 70B on 128 A100s with 400 Gb/s per node (50 GB/s aggregate) runs at 370 tokens/s
    per GPU, which per-GPU NIC bandwidth (6 GB/s) could not carry (throughput_cases_2.yaml).
    """
    bw = dp_bandwidth(cfg, hw)
    engine = f"hf_{job.sharding.value}" if job.framework.value == "hf" else job.framework.value
    if engine not in consts.get("zero_per_gpu_nic_engines", []):
        return bw
    per_node = np.minimum(cfg.cards, hw.cards_per_node).astype(np.float64)
    return np.where(hw.nodes > 1, np.minimum(bw, hw.inter_bytes_per_s / np.maximum(per_node, 1.0)), bw)


def zero_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """ZeRO-2/3 collectives of one micro-batch, seconds, (n,).

    Stages 2-3 reduce-scatter the 16-bit gradients of the trainable parameters every micro-batch:
    (d-1)/d x 2 P_train / (t p); stage 3 adds two all-gathers (forward, backward) of the base weights in their stored
    width B_w: 2 (d-1)/d x B_w P / (t p). ZeRO-3 / FSDP gathers every micro-batch (formulas.md Part II section 3.2:
    1.5 x DDP; LoRA gathers the frozen base). Latency: one collective per layer for each of the three, each
    (d-1) alpha (FSDP wraps each decoder layer; DeepSpeed fetches per module). Bandwidth: :func:`zero_bandwidth`.

    Hybrid sharding (HSDP, ``cfg.shard`` ranks per shard group below d; torch FSDP ShardingStrategy.HYBRID_SHARD:
    full sharding inside each node, replication across nodes): the three collectives run over the s ranks of the
    group, inside one node (d := s, intra-node link, intra-node latency), and each rank's reduced gradient shard,
    2 P_train / (t p s) bytes, is then all-reduced with the r = d / s replicas holding the same shard (FSDP's
    post-backward hook all-reduces across the replicate group after the reduce-scatter):
    2 (r-1)/r x 2 P_train / (t p s) / B_rep, where the node's s ranks run s such rings side by side over its NICs,
    B_rep = min(intra, inter / s), plus one all-reduce latency per layer over r ranks on r nodes.
    """
    a = job.arch
    split = (cfg.tp * cfg.pp).astype(np.float64)
    hybrid = cfg.hybrid
    shard = cfg.shard_ranks
    bw = np.where(hybrid, hw.intra_bytes_per_s, zero_bandwidth(job, cfg, hw, consts))
    grads = 2.0 * trainable_params(job) / split
    base_bytes = 2.0 if job.base_bits == 16 else job.base_bits / 8.0
    scatter = np.where(cfg.zero_stage >= 2, ring(shard, 1.0) * grads / bw, 0.0)
    gather = np.where(cfg.zero_stage >= 3, ring(shard, 2.0) * base_bytes * a.total_params / split / bw, 0.0)
    layers = a.layers / cfg.pp.astype(np.float64)
    calls = np.where(cfg.zero_stage >= 3, 3.0, np.where(cfg.zero_stage >= 2, 1.0, 0.0)) * layers
    nodes = np.where(hybrid, 1, dp_nodes(cfg, hw))
    own = scatter + gather + calls * ring_latency(shard, nodes, 1.0, consts)
    replicas = cfg.dp // np.maximum(shard, 1)
    rep_bw = np.minimum(hw.intra_bytes_per_s, hw.inter_bytes_per_s / np.maximum(shard, 1).astype(np.float64))
    replicate = ring(replicas, 2.0) * grads / shard.astype(np.float64) / rep_bw
    replicate = replicate + layers * allreduce_latency(replicas, replicas, consts)
    return own + np.where(hybrid & (cfg.zero_stage >= 2), replicate, 0.0)


def dp_sync_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Stages 0-1: gradient synchronisation once per optimizer step, seconds, (n,), half of it per phase.

    A ring all-reduce of the 16-bit gradients, 2 (d-1)/d x 2 P_train / (t p) / B_dp, is a reduce-scatter plus an
    all-gather of equal volume; ZeRO-1 (DeepSpeed stage 1, Megatron's distributed optimizer) runs exactly those
    two, the all-gather carrying the updated parameters. Latency: per bucket of ``allreduce_bucket_bytes`` (torch
    DDP and Megatron reduce gradients in buckets) one all-reduce (:func:`allreduce_latency`). Returns the total;
    timing.py hides the reduce-scatter half behind the backward and, on engines that overlap the parameter
    all-gather with the next forward, the other half too.
    """
    grads = 2.0 * trainable_params(job) / (cfg.tp * cfg.pp).astype(np.float64)
    buckets = np.ceil(grads / float(consts["allreduce_bucket_bytes"]))
    volume = ring(cfg.dp, 2.0) * grads / dp_bandwidth(cfg, hw)
    latency = buckets * allreduce_latency(cfg.dp, dp_nodes(cfg, hw), consts)
    return np.where(cfg.zero_stage >= 2, 0.0, volume + latency)


def tp_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Tensor-parallel collectives of one micro-batch, seconds, (n,), before any overlap.

    Megatron TP: 2 all-reduces forward and 2 backward per layer of b s h activations in 16 bits (6 with full
    recomputation); with sequence parallelism each becomes an all-gather plus a reduce-scatter of the same bytes
    (Shoeybi et al. 2019, arXiv 1909.08053; Korthikanti et al. 2022, arXiv 2205.05198 section 4.2.2). Ring over the
    t GPUs of the NVLink domain, plus 2 (t-1) alpha_intra per collective.
    """
    a = job.arch
    per_layer = np.where(cfg.checkpointing == _CK_FULL, 6.0, 4.0) * a.layers / cfg.pp.astype(np.float64)
    volume = per_layer * cfg.micro_batch * row_tokens(job, cfg) * a.hidden * 2.0
    return ring(cfg.tp, 2.0) * volume / hw.tp_bytes_per_s + per_layer * ring_latency(cfg.tp, cfg.tp * 0, 2.0, consts)


def pp_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Pipeline point-to-point traffic of one micro-batch on one stage, seconds, (n,).

    Each stage boundary sends the b s h activation (16 bits) forward and its gradient backward, split over the t
    ranks of the stage (Megatron scatter-gather optimisation, Narayanan et al. 2021 section 4.1): 2 x 2 b s h / t
    bytes. Stages of t >= cards-per-node ranks sit on different nodes, so the network carries it.
    """
    a = job.arch
    bytes_ = 4.0 * cfg.micro_batch * row_tokens(job, cfg) * a.hidden / cfg.tp.astype(np.float64)
    bw = np.where(hw.nodes > 1, np.minimum(hw.intra_bytes_per_s, hw.inter_bytes_per_s / hw.cards_per_node),
                  hw.intra_bytes_per_s)  # fmt: skip
    alpha = np.where(hw.nodes > 1, float(consts["collective_latency_s"]["network"]), 0.0)
    return np.where(cfg.pp > 1, bytes_ / bw + 2.0 * alpha, 0.0)
