"""Bytes per usage event document and per job document in Elasticsearch: 20,000 node
samples of 2,000 jobs (the node-usage bench phase's feed) through the sink's bulk client
and templates into scratch indices (``sizetest-``), force-merged, then their store size.
Run from the repository root with the local stack up; deletes its indices at the end."""
import json
import time

from pipeline.replay.readback import client
from pipeline.runtime.config import Config
from pipeline.sink.names import Family
from pipeline.tooling.bench import ceilings
from pipeline.tooling.bench.feed import expected_documents
from pipeline.tooling.bench.usage import usage_feed

cfg = Config().replace(elasticsearch={"index_prefix": "sizetest-"})
feed = usage_feed(500, 4, 10, seed=5, start=time.time())
events = ceilings.worker_event_documents(cfg, feed)
docs = list(expected_documents(cfg, feed).values())
es = client(cfg, timeout=120.0)
ceilings.bulk_ceiling(cfg, es, Family.EVENTS, events)
ceilings.bulk_ceiling(cfg, es, Family.JOBS, docs)
es.indices.refresh(index="sizetest-*")
es.indices.forcemerge(index="sizetest-*", max_num_segments=1)
time.sleep(2)
st = es.indices.stats(index="sizetest-*", metric=["store", "docs"])
for name, idx in sorted(st["indices"].items()):
    p = idx["primaries"]
    print(name, p["docs"]["count"], p["store"]["size_in_bytes"],
          round(p["store"]["size_in_bytes"] / max(p["docs"]["count"], 1), 1), "bytes/doc")
print("source bytes/event", round(sum(len(json.dumps(e)) for e in events) / len(events), 1))
es.options(ignore_status=404).indices.delete(index="sizetest-*", expand_wildcards="all")
es.options(ignore_status=404).indices.delete_index_template(name="sizetest-*")
