"""What the pages and the API share at the HTTP edge: the API decorator and its errors,
Idempotency-Key, the dashboard views' helpers, URLs, and the protocols presenters read."""
