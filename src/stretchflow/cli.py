def main():
    raise SystemExit("stretchflow CLI under construction")
