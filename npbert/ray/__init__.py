"""npbert on a Ray cluster, through Ray Data (pip install 'npbert[ray]').

    import ray, npbert.ray
    texts = ray.data.read_parquet("s3://bucket/corpus/")            # a `text` column
    embedded = npbert.ray.embed_dataset(texts, "sentence-transformers/all-MiniLM-L6-v2")
    embedded.write_parquet("s3://bucket/embedded/")

`Embed` (npbert.ray.dataset) is the callable class for `Dataset.map_batches`: each actor
loads the model once (a local directory, or a Hub repo id fetched into that node's cache:
only the embedding tensors), and embeds on one thread. `embed_corpus_on_ray`
(npbert.ray.corpus) is the corpus job of npbert.stream with Ray actors in place of worker
processes; npbert.ray.cluster joins or starts the cluster.

The package is named for what it adds (npbert.ray); it does not shadow the ray package
because imports are absolute (`import ray` in it is the top-level package). Nothing else in
npbert imports it, so npbert's core never imports Ray.
"""

from npbert.ray.corpus import embed_corpus_on_ray
from npbert.ray.dataset import Embed, embed_dataset

__all__ = ["Embed", "embed_corpus_on_ray", "embed_dataset"]
