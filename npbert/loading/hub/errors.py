"""huggingface_hub's, the network's and the disk's exceptions as one-line InputErrors, naming
the repo, the file and what to do where that is known."""

import errno
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import unquote

from npbert.errors import InputError, first_line
from npbert.loading.hub.access import Access, hub_address, named_at
from npbert.loading.hub.ranges import network_errors

# How a token is passed, for the advice of a refusal (the command line spells {token} its own way).
PASS_A_TOKEN = "pass a token ({token}, HF_TOKEN or `hf auth login`)"
# The Hub's X-Error-Message for a token it does not know (mistyped, revoked, expired).
TOKEN_REFUSED = "Invalid credentials in Authorization header"
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)  # a read-only cache, or another's
# huggingface_hub's check of a small file's download against the size the server announced:
# a plain OSError (no errno, no class of its own) whose second line is advice for Python.
WRONG_SIZE = re.compile(
    r"Consistency check failed: file should be of size (\d+) but has size (\d+) \((.*)\)\."
)


class NotFound(InputError):
    """The name is neither on the Hub nor in the cache (no such repo, or the Hub unreachable),
    nor, from resolve, a directory here."""


class Unreachable(NotFound):
    """The Hub could not be reached (`reach` says so, with the reason where one is known), and
    what was asked for is not in the cache."""

    def __init__(self, reach: str, what: str):
        super().__init__(
            f"{reach} and {what} is not cached: connect, or set HF_ENDPOINT, and fetch it once"
        )
        self.reach = reach


@dataclass(frozen=True)
class About:
    """What a request was about, for its error's message."""

    repo_id: str
    revision: str | None
    access: Access

    @property
    def at(self) -> str:
        return named_at(self.repo_id, self.revision)


@contextmanager
def hub_errors(repo_id: str, revision: str | None, access: Access) -> Iterator[None]:
    """huggingface_hub's, the network's and the disk's exceptions in the block as one-line
    InputErrors; any other passes as it is."""
    try:
        yield
    except Exception as error:
        said = one_line_error(error, About(repo_id, revision, access))
        if said is None:
            raise
        raise said from None


def one_line_error(error: Exception, about: About) -> InputError | None:
    """The InputError that says `error`, or None where it is not one of those hub_errors says."""
    from huggingface_hub import utils as hf

    for kinds, said in (  # first match first: a subclass before its base
        (hf.HFValidationError, invalid_repo_id),
        (hf.LocalTokenNotFoundError, no_saved_token),  # an OSError
        (hf.GatedRepoError, gated),  # a RepositoryNotFoundError
        (hf.RepositoryNotFoundError, repo_not_found),
        (hf.RevisionNotFoundError, revision_not_found),
        (hf.FileMetadataError, stripped_answer),  # an OSError
        ((hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled), no_file),
        (hf.EntryNotFoundError, file_not_found),
        (hf.HfHubHTTPError, answered),
        (network_errors(), failed_request),  # requests' are OSErrors
        (OSError, disk_error),
    ):
        if isinstance(error, kinds):
            return said(error, about)
    return None


def invalid_repo_id(error, about: About) -> InputError:
    return InputError(f"{about.repo_id!r} is not a valid Hub repo id: {first_line(error)}")


def no_saved_token(error, about: About) -> InputError:
    return InputError(
        "{token=True} asks for the saved token, and none is saved: `hf auth login` saves one, "
        "or give it as {token} or HF_TOKEN"
    )


def gated(error, about: About) -> InputError:
    if token_sent(error):
        return InputError(
            f"{about.repo_id} is gated or private (401/403) and the token sent has no access to "
            "it: accept its terms on the Hub with that token's account, or use another"
        )
    return InputError(
        f"{about.repo_id} is gated or private (401/403): accept its terms on the Hub, then "
        + PASS_A_TOKEN
    )


def repo_not_found(error, about: About) -> InputError:
    if token_refused(error):  # 0.x calls every 401 of the API "repository not found"
        return answered(error, about)
    return NotFound(
        f"{about.repo_id}: repository not found on {hub_address()}; if it is private, "
        + PASS_A_TOKEN
    )


def revision_not_found(error, about: About) -> InputError:
    return InputError(f"{about.repo_id}: revision {about.revision or 'main'!r} not found")


def no_file(error, about: About) -> InputError:
    """A file not cached and not fetched: huggingface_hub 0.x says so for any failed request,
    an answer from the Hub included, with the request's error as the cause."""
    from huggingface_hub import utils as hf

    cause = error.__cause__
    if isinstance(cause, hf.HfHubHTTPError):
        return answered(cause, about)
    if isinstance(cause, hf.FileMetadataError):
        return stripped_answer(cause, about)
    if isinstance(cause, network_errors()) and requested_file(cause):
        return failed_request(cause, about)
    return Unreachable(f"cannot reach {hub_address()}", about.at)


def file_not_found(error, about: About) -> InputError:
    """The file is named from the answer's URL: the message's first line names none."""
    url = str(getattr(getattr(error, "response", None), "url", None) or "")
    return InputError(f"{about.at}: {file_in(url) or f'a file ({first_line(error)})'} not found")


def stripped_answer(error, about: About) -> InputError:
    """The answer for a file lacked the headers the Hub sends (its ETag, the commit), which a
    proxy between here and the Hub may remove."""
    return InputError(
        f"{hub_address()} answered without the headers a Hub sends ({first_line(error)}): "
        "is a proxy removing them, or HF_ENDPOINT not a Hub?"
    )


def failed_request(error, about: About) -> InputError:
    """A request that got no answer or a broken one (after huggingface_hub's retries, where it
    makes them), naming the file it was for: the Hub had answered npbert's first request."""
    name = requested_file(error)
    what = "no answer" if timed_out(error) else "network error"
    where = f"for {name} from" if name else "talking to"
    return InputError(
        f"{about.at}: {what} {where} {hub_address()} ({first_line(error)}); nothing was cached, "
        "try again"
    )


def disk_error(error: OSError, about: About) -> InputError | None:
    """A download cut short, a full cache or one this process may not write; None for another
    OSError (a bug's, to be seen as it is)."""
    wrong_size = WRONG_SIZE.match(str(error))
    if wrong_size:
        announced, got, name = wrong_size.groups()
        return InputError(
            f"{about.at}: {name.rpartition('/')[2]} came {got} bytes long, not the {announced} "
            "the server announced; nothing was cached, try again"
        )
    if error.errno not in (errno.ENOSPC, errno.EDQUOT, *NOT_WRITABLE):
        return None
    return cache_write_error(error.filename or about.access.cache, error.strerror, error.errno)


def cache_write_error(path, reason: str, code: int | None = None) -> InputError:
    """The cache could not be written: full (the default), or not writable here (code)."""
    advice = "make room there, or choose another"
    if code in NOT_WRITABLE:
        advice = "this process may not write there: choose a writable"
    return InputError(
        f"cannot write {path} ({reason}): {advice} Hugging Face cache with HF_HOME, "
        "HF_HUB_CACHE or {cache_dir}"
    )


def answered(error, about: About) -> InputError:
    """An error status from the Hub, with what to do where the status says."""
    status = getattr(error.response, "status_code", None)
    if token_refused(error):
        advice = f": the Hub does not know the token sent; check it, or {PASS_A_TOKEN}"
    elif status == 403 and token_sent(error):
        advice = ": the token sent has no access to it (a fine-grained token may lack the repo)"
    elif status in (401, 403):
        advice = f": if the repo is private or gated, {PASS_A_TOKEN}"
    elif status == 429:
        advice = ": rate limited; wait and try again (a token raises the limit)"
    else:
        advice = ""
    return InputError(f"{about.at}: the Hub answered {status_line(error)}{advice}")


def status_line(error) -> str:
    """An error status as '503 Service Unavailable for URL', whichever client got it."""
    response = error.response
    if response is None:
        return first_line(error)
    reason = getattr(response, "reason_phrase", None) or getattr(response, "reason", "")
    return f"{response.status_code} {reason} for {response.url}"  # httpx's name, requests'


def token_refused(error) -> bool:
    return error.response is not None and (
        error.response.headers.get("X-Error-Message") == TOKEN_REFUSED
    )


def token_sent(error) -> bool:
    """Whether the request the Hub refused carried a token."""
    try:
        return bool(error.response.request.headers.get("Authorization"))
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError where no request is set
        return False


def timed_out(error: Exception) -> bool:
    """Whether a network error is a timeout: each HTTP client names its timeouts so (httpx's
    ReadTimeout, requests' ConnectTimeout, urllib3's ReadTimeoutError)."""
    return "timeout" in type(error).__name__.lower()


def requested_file(error: Exception) -> str:
    """The repo file a network error's request was for, or "" (the request is unknown)."""
    try:
        url = str(error.request.url)  # httpx raises RuntimeError where no request is set
    except (AttributeError, RuntimeError):
        return ""
    return file_in(url)


def file_in(url: str) -> str:
    """The file of a Hub file URL (.../resolve/REVISION/FILE), or ""."""
    _, resolve, path = url.partition("/resolve/")
    return unquote(path.partition("/")[2]) if resolve else ""


def not_model_info(repo_id: str, error: Exception) -> InputError:
    """An answer that is not a Hub's model info: a login page, a server at the wrong address."""
    return InputError(
        f"{hub_address()} answered for {repo_id} with what is not a Hub's model info "
        f"({type(error).__name__}: {first_line(error)}): is HF_ENDPOINT a Hub?"
    )


@contextmanager
def quiet_library_logs() -> Iterator[None]:
    """Keep huggingface_hub's warnings (a line for each retry of a failed request) off the
    terminal: npbert reports a failure itself, in one line. HF_HUB_VERBOSITY shows them."""
    from huggingface_hub.utils import logging as hf_logging

    logger = hf_logging.get_logger()  # the library's root logger
    level = logger.level
    if "HF_HUB_VERBOSITY" not in os.environ:
        logger.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        logger.setLevel(level)
