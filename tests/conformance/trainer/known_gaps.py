KNOWN_GAPS: dict[str, str] = {}
