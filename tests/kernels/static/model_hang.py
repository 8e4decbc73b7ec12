# Corpus: an untrusted candidate that never returns from import; the reader must time out cleanly.
import time

while True:
    time.sleep(1)
