"""A repo's model info and whole files, through huggingface_hub (its cache, session, token and
retries), with npbert's bound on the first request and a word when a small file is slow."""

import json
from contextlib import nullcontext
from pathlib import Path

from npbert.errors import InputError, first_line
from npbert.loading.checkpoint import INDEX_FILE, read_index
from npbert.loading.hub.access import Access, first_answer_timeout, hub_address, notice_after
from npbert.loading.hub.errors import Unreachable, not_model_info, timed_out
from npbert.loading.hub.ranges import network_errors


def model_info(repo_id: str, revision: str | None, access: Access):
    """The repo's commit and file list at `revision` (huggingface_hub's ModelInfo).

    npbert's first request to the Hub, made with a bounded timeout and no retries: an
    unreachable Hub, or one that never answers, is reported at once (huggingface_hub's
    downloads retry a first request that fails, for up to several minutes)."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import HfHubHTTPError, HFValidationError

    try:
        return HfApi().model_info(
            repo_id, revision=revision, token=access.token, timeout=first_answer_timeout()
        )
    except (HfHubHTTPError, HFValidationError):  # an answer (in 0.x one of requests' errors
        # too), or a repo id refused before any request (a ValueError): hub_errors says which
        raise
    except json.JSONDecodeError as error:  # before network_errors: requests' is one of them
        raise not_model_info(repo_id, error) from None
    except network_errors() as error:
        reason = first_line(error)
        if timed_out(error):
            reason = f"no answer in {first_answer_timeout():g} s; HF_HUB_ETAG_TIMEOUT=S waits S s"
        raise Unreachable(f"cannot reach {hub_address()} ({reason})", repo_id) from None
    except (ValueError, TypeError, AttributeError, KeyError) as error:  # JSON, not an object
        raise not_model_info(repo_id, error) from None


def hf_download(repo_id: str, filename: str, revision, access: Access, *, small=True) -> Path:
    """A file of the repo, through huggingface_hub's cache, as hf_hub_download finds or fetches
    it; a small one says if it is slow (a weights file has huggingface_hub's progress bar)."""
    from huggingface_hub import hf_hub_download

    with still_waiting(filename) if small else nullcontext():
        try:
            return Path(
                hf_hub_download(
                    repo_id,
                    filename,
                    revision=revision,
                    token=access.token,
                    cache_dir=access.cache_dir,
                    etag_timeout=first_answer_timeout(),
                )
            )
        except ValueError as error:  # the commit the server named would leave the snapshots
            if "pointer path" not in str(error):  # (huggingface_hub's own words)
                raise
            raise InputError(
                f"{repo_id}: the answer for {filename} names a commit that is not a commit's "
                f"name ({first_line(error)}); nothing was cached"
            ) from None


def still_waiting(filename: str):
    """Warn once if fetching a small file takes longer than its first request may. When that
    request gets no answer and nothing is cached, recent huggingface_hub (not 0.x) retries it
    with a 60 s timeout of its own, 6 times: over 6 minutes with no sign of life."""
    after = first_answer_timeout() + 2
    return notice_after(
        after,
        f"still waiting for {filename} from {hub_address()} after {after:g} s: huggingface_hub "
        "retries a request that fails or gets no answer, for up to several minutes (Ctrl-C "
        "stops)",
    )


def weight_map(repo_id: str, commit: str, files: set[str], access: Access) -> dict[str, str]:
    """The index's tensor name -> shard, every shard one of the repo's files."""
    mapped = read_index(hf_download(repo_id, INDEX_FILE, commit, access))
    strangers = sorted({str(s) for s in mapped.values()} - files)
    if strangers:
        raise InputError(f"{repo_id}/{INDEX_FILE} names shards the repo does not have: {strangers}")
    return mapped
