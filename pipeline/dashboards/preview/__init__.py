"""A preview of the dashboards without a Grafana: every panel drawn from real answers.

* :mod:`~pipeline.dashboards.preview.frames` -- the data frame model;
* :mod:`~pipeline.dashboards.preview.es_frames` -- Elasticsearch answers to frames, as
  Grafana's Elasticsearch data source makes them;
* :mod:`~pipeline.dashboards.preview.expressions` -- Grafana's server-side math;
* :mod:`~pipeline.dashboards.preview.transforms` -- the panels' transformations;
* :mod:`~pipeline.dashboards.preview.draw` -- one panel, drawn with matplotlib, by kind in
  :mod:`~pipeline.dashboards.preview.draw_series` (time series, bar charts),
  :mod:`~pipeline.dashboards.preview.draw_values` (stats, bar gauges) and
  :mod:`~pipeline.dashboards.preview.draw_tables` (tables, logs), on a
  :mod:`~pipeline.dashboards.preview.canvas` the panel's size; what the panel's field
  config says of each field in :mod:`~pipeline.dashboards.preview.fieldconfig`, values by
  unit in :mod:`~pipeline.dashboards.preview.units`;
* :mod:`~pipeline.dashboards.preview.page`, :mod:`~pipeline.dashboards.preview.sheet` --
  the HTML pages on the dashboards' grids, and one picture per dashboard;
* :mod:`~pipeline.dashboards.preview.previewer` -- runs it all for ``dashboards preview``.

It is a preview: drawn by jobstream from the same answers Grafana would get, and says so on
every image; what it cannot draw faithfully it shows as a labelled placeholder.
"""
