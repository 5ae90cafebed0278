"""Readers (and writers) of the real data formats, each returning the common `Split` / `Corpus` form.

`precomp` (SCAN / VSE region features), `karpathy` (raw COCO / Flickr30K images + Karpathy json),
`coco_instances` (COCO concept labels for plausible matches), `cub` (CUB-200-2011 + text_c10 + Xian et
al. class split), `drilldown` (Visual Genome in Drill-down's layout); `sidecar` holds what a format has
no place for when the scenes benchmark is exported; `common` the strict text / image / finiteness checks.
Layouts and downloads: docs/data.md. The front door is `xmr_core.data.load.load_corpus`.
"""
