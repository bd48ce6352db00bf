"""The operators' pages (SPEC §4): views, presenters and the socket paths they link to."""
