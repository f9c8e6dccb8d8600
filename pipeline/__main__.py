from pipeline.cli import app

app(prog_name="nmt")
