"""Talks to docqa's OpenAI-compatible endpoint with the official `openai` Python package.

Usage: openai_client.py BASE_URL API_KEY DOCUMENT_ID
Prints one JSON object with what it saw; exits non-zero when the client library rejects a response.
"""

import json
import sys

import openai
from openai import OpenAI


def main() -> None:
    base, key, document_id = sys.argv[1:4]
    client = OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=300)
    scope = {"docqa": {"document_ids": [document_id]}}
    question = [{"role": "user", "content": "In what country is Normandy located?"}]

    models = [m.id for m in client.models.list()]

    plain = client.chat.completions.create(
        model="docqa-rag", messages=question, max_tokens=16, extra_body=scope
    )
    plain_extension = plain.model_extra["docqa"]

    chunks = list(
        client.chat.completions.create(
            model="docqa-rag", messages=question, max_tokens=16, stream=True, extra_body=scope
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = chunks[-1]

    try:
        OpenAI(base_url=f"{base}/v1", api_key="dq_wrong", max_retries=0).models.list()
        wrong_key = "accepted"
    except openai.AuthenticationError as e:
        wrong_key = e.status_code

    print(
        json.dumps(
            {
                "models": models,
                "plain_content": plain.choices[0].message.content,
                "plain_finish_reason": plain.choices[0].finish_reason,
                "plain_route": plain_extension["route"],
                "plain_citations": len(plain_extension["citations"]),
                "plain_usage_prompt_tokens": plain.usage.prompt_tokens,
                "stream_chunks": len(chunks),
                "stream_content": streamed,
                "stream_finish_reason": last.choices[0].finish_reason,
                "stream_route": last.model_extra["docqa"]["route"],
                "stream_citations": len(last.model_extra["docqa"]["citations"]),
                "wrong_key": wrong_key,
            }
        )
    )


if __name__ == "__main__":
    main()
