"""Many ranks on Dask: per-rank tasks that return compact typed summaries, merged by a reducer.

`engine` runs tasks in this process or on a Dask cluster (an embedded `LocalCluster`, or an
existing scheduler), `remote` lists and fetches trace files through fsspec (local paths,
`s3://`, `gs://`, `https://`...), `tasks` turns one rank's trace into a `RankSummary`
(`summary`), `reduce` merges the summaries into the report's `distributed` section.
"""
