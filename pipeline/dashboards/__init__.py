"""Grafana dashboards as code, and the check that runs their queries against Elasticsearch.

* :mod:`~pipeline.dashboards.datasources` -- the provisioned data sources (one per index
  and time field);
* :mod:`~pipeline.dashboards.builder`, :mod:`~pipeline.dashboards.overview`,
  :mod:`~pipeline.dashboards.job`, :mod:`~pipeline.dashboards.node` (and the overview's
  node row, :mod:`~pipeline.dashboards.overview_nodes`) -- the dashboards;
* :mod:`~pipeline.dashboards.render` -- the files of ``grafana/``;
* :mod:`~pipeline.dashboards.grafana_query` -- the requests Grafana sends for a target;
* :mod:`~pipeline.dashboards.grafana_time` -- times and intervals as Grafana reads them;
* :mod:`~pipeline.dashboards.fields`, :mod:`~pipeline.dashboards.check`,
  :mod:`~pipeline.dashboards.answers` -- the check.

May import: ``pipeline.sink`` (the index names and the Elasticsearch client the check
shares with it) and everything below it. Not the edges, the agents or the tooling.
"""
