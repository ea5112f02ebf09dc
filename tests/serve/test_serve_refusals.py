"""What the server refuses, and how it says so: other scripts, a voices folder with files that are no voice,
silent or broken uploads (named as the user named them), JSON sent as text/plain, and where uploads live.

HTTP cases use the session's in-process server (conftest ``server``); none of them synthesises anything.
"""

from __future__ import annotations

import io
import logging
import shutil

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.serve.servehelpers import API_KEY, VOICE_CLIP
from xtts_ft.serve.text_pieces import UnreadableText, check_readable
from xtts_ft.serve.voices import VoiceError, VoiceLibrary
from xtts_ft.webapp.speak import reading

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _wav(seconds: float, amplitude: float = 0.0, rate: int = 22050) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate, format="WAV")
    return buf.getvalue()


@pytest.mark.parametrize("text, words", [
    ("ሰላም Привет", "letters in a script the model does not read (Cyrillic: 'Привет')"),
    ("ሰላም 你好", "letters in a script the model does not read (Cjk: '你好')"),
    ("ሰላም 😀", "symbols the model cannot say (😀)"),
])
def test_other_scripts_and_emoji_are_a_400_not_silently_dropped(server, text, words):
    response = httpx.post(server.url + "/v1/audio/speech", headers=AUTH, timeout=30,
                          json={"input": text, "voice": "spk1", "response_format": "wav"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "input" and error["message"].startswith("input: ") and words in error["message"]


def test_formatting_marks_and_latin_words_are_still_spoken_as_before():
    check_readable("ሰላም *ዛሬ* #ጥሩ café 50%", "am", "input")  # marks read as word breaks, Latin kept
    check_readable("Привет", "ru", "input")  # another language's text goes to coqui's own front-end


def test_the_web_apps_speak_tab_uses_the_same_rule():
    from xtts_ft.text_settings import TextSettings

    settings = TextSettings(fold_homophones=False, char_limit=200)
    for text in ("ሰላም Привет", "ሰላም 😀"):
        with pytest.raises(UnreadableText) as server_side:
            check_readable(text, "am", "text")
        with pytest.raises(UnreadableText) as app_side:
            reading(text, settings)
        assert str(app_side.value) == str(server_side.value)


def test_json_sent_as_text_plain_is_told_the_content_type(server):
    response = httpx.post(server.url + "/v1/audio/speech", timeout=30,
                          headers={**AUTH, "content-type": "text/plain"},
                          content=b'{"input": "\xe1\x88\xb0\xe1\x88\x8b\xe1\x88\x9d", "voice": "spk1"}')
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "Content-Type 'text/plain'" in message and "application/json" in message and "\n" not in message


def test_a_silent_upload_is_refused_naming_the_users_file(server):
    response = httpx.post(server.url + "/v1/voices", headers=AUTH, data={"name": "quiet"},
                          files={"file": ("my quiet take.wav", _wav(3.0), "audio/wav")}, timeout=30)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "'my quiet take.wav'" in message and "silent" in message and "quiet" not in httpx.get(
        server.url + "/v1/voices", headers=AUTH).json()["voices"]


def test_an_upload_that_does_not_decode_names_the_users_file_not_a_temporary_path(server, voices_dir):
    response = httpx.post(server.url + "/v1/voices", headers=AUTH, data={"name": "notes"},
                          files={"file": ("notes.wav", b"these are my notes, not audio", "audio/wav")}, timeout=30)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "'notes.wav'" in message and "cannot be decoded" in message
    assert str(voices_dir) not in message and "xtts_ft_voices_" not in message and "/tmp" not in message
    assert not (voices_dir / "notes.wav").exists()


def test_where_uploads_go_is_said_in_the_voice_list_and_health(server, voices_dir):
    listed = httpx.get(server.url + "/v1/voices", headers=AUTH).json()
    assert listed["uploads"] == f"saved in {voices_dir}"
    assert httpx.get(server.url + "/health").json()["uploads"] == listed["uploads"]


def test_without_a_voices_folder_uploads_are_said_to_vanish_on_restart(tmp_path):
    from xtts_ft.serve.http_app import uploads_note

    library = VoiceLibrary()
    voice = library.add("me", VOICE_CLIP.read_bytes(), ".flac", filename="me.flac")
    assert not library.uploads_kept and voice.path.is_file()
    assert "only until the server stops" in uploads_note(library) and "--voices DIR" in uploads_note(library)
    assert uploads_note(VoiceLibrary(folder=tmp_path)) == f"saved in {tmp_path}"


def test_the_voices_folder_is_checked_at_start_each_skip_one_line(tmp_path, caplog):
    folder = tmp_path / "voices"
    folder.mkdir()
    shutil.copyfile(VOICE_CLIP, folder / "good.flac")
    (folder / "junk.wav").write_text("not audio at all")
    (folder / "README.txt").write_text("my voices")
    shutil.copyfile(VOICE_CLIP, folder / "two words.flac")  # a space: not a voice name
    (folder / "silent.wav").write_bytes(_wav(3.0))
    (folder / "blip.wav").write_bytes(_wav(0.1, 0.5))
    with caplog.at_level(logging.WARNING, logger="xtts_ft.serve.voices"):
        library = VoiceLibrary(folder=folder)
    assert library.names() == ["good"]
    reasons = dict(line.split(": ", 1) for line in library.skipped)
    assert sorted(reasons) == ["README.txt", "blip.wav", "junk.wav", "silent.wav", "two words.flac"]
    assert "not an audio file" in reasons["README.txt"] and "cannot be decoded" in reasons["junk.wav"]
    assert "not a usable voice name" in reasons["two words.flac"] and "silent" in reasons["silent.wav"]
    assert "only 0.10 s" in reasons["blip.wav"]
    skipped_lines = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped_lines) == 5 and all("\n" not in line for line in skipped_lines)
    with pytest.raises(VoiceError, match="voice 'junk': unknown; available voices: good"):
        library.get("junk")
