"""GET /status: what the server holds, as JSON."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

bp = Blueprint("status", __name__)


@bp.route("/status", methods=["GET"])
def status() -> Response:
    dataset = current_app.extensions["dataset"]
    head = dataset.revision(dataset.head)
    return jsonify({
        "dataset": {
            "head": head.to_json() if head else None,
            "revisions": dataset.head,
            "oldest_readable_revision": dataset.oldest_readable,
        },
    })
