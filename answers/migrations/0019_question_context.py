"""Each question's context: the earlier turns its prompt held as history, and theirs in
turn (docs/access.md, "Withheld answers"). An answer is withheld when one of them is.

What earlier follow-ups were given is not known: each is linked to every earlier turn of
its conversation, the most its prompt can have held, so none is shown that might echo an
answer withheld from its viewer.
"""

from django.db import migrations, models


def link_earlier_turns(apps, schema_editor):
    Question = apps.get_model("answers", "Question")
    through = Question.context.through
    connection = schema_editor.connection
    quote = connection.ops.quote_name
    questions = quote(Question._meta.db_table)
    sql = (
        f"INSERT INTO {quote(through._meta.db_table)} "  # noqa: S608 (names quoted)
        f"({quote('from_question_id')}, {quote('to_question_id')}) "
        f"SELECT later.{quote('id')}, earlier.{quote('id')} "
        f"FROM {questions} later JOIN {questions} earlier "
        f"ON earlier.{quote('conversation_id')} = later.{quote('conversation_id')} "
        f"AND earlier.{quote('turn')} < later.{quote('turn')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("answers", "0018_conversation_last_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="question",
            name="context",
            field=models.ManyToManyField(blank=True, related_name="+", to="answers.question"),
        ),
        migrations.RunPython(link_earlier_turns, migrations.RunPython.noop, elidable=True),
    ]
