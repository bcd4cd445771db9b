"""A minimal client of Prometheus' HTTP query API (httpx), shared by the TUI and the scaling report.

API: https://prometheus.io/docs/prometheus/latest/querying/api/
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx


class PrometheusError(RuntimeError):
    """Prometheus could not be reached or did not answer a query."""


@dataclass
class PrometheusAPI:
    """A minimal client of Prometheus' query API.

    Args:
        url: the server's base URL (``http://host:9090``, or with a path prefix).
        timeout: seconds per request.
    """

    url: str
    timeout: float = 10.0

    def __post_init__(self) -> None:
        self._client = httpx.Client(base_url=self.url.rstrip("/"), timeout=self.timeout)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def _get(self, path: str, params: dict[str, str]) -> tuple[str, list[dict]]:
        try:
            response = self._client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise PrometheusError(f"cannot reach {self.url} ({type(exc).__name__}: {exc})") from None
        try:
            body = response.json()
        except ValueError:
            raise PrometheusError(
                f"{self.url} answered HTTP {response.status_code} without Prometheus "
                "API JSON; is it a Prometheus server?"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body if not isinstance(body, dict) else f"{body.get('errorType')}: {body.get('error')}"
            raise PrometheusError(f"query failed at {self.url}: {error}")
        return body["data"]["resultType"], body["data"]["result"]

    def query(self, expr: str, at: float) -> tuple[str, list[dict]]:
        """Evaluate ``expr`` at Unix time ``at``; return ``(resultType, result)``.

        Raises:
            PrometheusError: unreachable, a non-Prometheus answer, or a query error.
        """
        return self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        """Evaluate ``expr`` from ``start`` to ``end`` every ``step`` seconds; the matrix result.

        Raises:
            PrometheusError: as ``query``.
        """
        return self._get(
            "/api/v1/query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        )[1]
